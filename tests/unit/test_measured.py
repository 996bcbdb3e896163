"""The measured layer (perf/measured.py): the rows `gpufleet bench --record` keeps, checked for what they mean when read
back (the file or the team store: anyone's), and the speed compare and calibrate --mine take from them. From the
hostile review rev52 (findings 2 and 6): a row's own stored prediction, a row beyond its GPU's peak, a multi-node
row's shortfall and rows that break the team's calibrate --mine. No assertion is about a speed of this machine."""

import dataclasses
import json

import pytest

from gpufleet.perf import calibration, measured, workloads
from gpufleet.perf.model import predict

from conftest import cli


def _row(cat, gpu: str, workload: str, batch: int, ratio: float, claimed: float = 1.0, **kw) -> measured.Measured:
    """A recorded row of ``gpu`` running ``workload`` at ``ratio`` x today's model, carrying a prediction of
    ``claimed`` x today's model (what the model said when it was recorded, or what its writer put there)."""
    w = measured.bench_workload(workload)
    now = predict(measured.scenario(w, cat.gpu(gpu), batch)).per_gpu
    fields = dict(gpu=gpu, workload=workload, family=w.family, unit=f"{w.unit}/s", measured=now * ratio,
                  predicted=now * claimed, batch=batch, when="2026-11-20T10:00:00Z", host="node-1")
    return measured.Measured(**{**fields, **kw})


def _offers(gpu: str, workload: str) -> dict:
    doc = json.loads(cli("--json", "compare", workload, "--gpu", gpu, "--top", "0").stdout)
    return {(o["provider"], o["region"], o["instance"]): o for o in doc["offers"]}


# ---- compare holds each row to today's model, on one node, below the GPU's peak -----------------------------------

def test_a_row_is_held_to_todays_model_not_to_the_prediction_it_carries(cat, tmp_path, monkeypatch):
    """compare multiplies the GPU's speed by measured / the row's own `predicted` (measured.speed), a number written
    when the row was recorded (by the fit of that gpufleet release) or by whoever wrote the row to the team store.
    A GPU that runs exactly as today's model predicts, recorded under a fit that predicted it 2x faster (or by a
    writer who says so), is then predicted at half its measured speed by every user of the team."""
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))
    before = _offers("H200", "bert-large")
    measured.add([_row(cat, "H200", "bert-large", 128, ratio=1.0, claimed=2.0)])
    after = _offers("H200", "bert-large")
    one = min(after, key=lambda k: after[k]["nodes"])  # one node: BERT is compute-bound there (test_bench's reading)
    assert after[one]["throughput"] == pytest.approx(before[one]["throughput"], rel=0.05), (
        f"the GPU ran as today's model predicts, yet compare now predicts it at "
        f"{after[one]['throughput'] / before[one]['throughput']:.2f}x: the row's stored prediction is trusted")


def test_a_row_claiming_more_than_the_gpus_peak_does_not_move_compare(cat, tmp_path, monkeypatch):
    """RATIO_BOUNDS lets a row say 20x the model; for BERT-large on an H100 (the model: ~30% MFU) 19x is ~560% of
    the GPU's dense BF16 peak, a speed no GPU has. Read from the team store (anyone of the team writes there) it
    becomes every teammate's H100 prediction. A row is at most the GPU's peak (MFU <= 1) before it is used."""
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))
    measured.add([_row(cat, "H100", "bert-large", 128, ratio=19.0)])
    w = workloads.get("bert-large")
    peak = cat.gpu("H100").tflops["bf16"] * 1e12
    for o in _offers("H100", "bert-large").values():
        per_gpu = o["throughput"] / (o["gpus_per_node"] * o["nodes"])
        assert per_gpu * w.train_flops <= peak, (
            f"{o['instance']}: compare predicts {per_gpu * w.train_flops / peak:.0%} of the H100's dense BF16 peak "
            "from one recorded row")
    doc = json.loads(cli("--json", "compare", "bert-large", "--gpu", "H100", "--top", "1").stdout)
    assert "measured" not in doc["offers"][0]["tags"]
    assert any(a.startswith("measured: H100 rows not applied") and "peak" in a for a in doc["assumptions"])


def test_a_two_node_jobs_shortfall_does_not_slow_one_gpus_compute(cat, tmp_path, monkeypatch):
    """measured.speed ignores a row's gpus/nodes: the ratio of a 2-node FSDP2 job (16 H100, whose shortfall is as
    likely the network: the issue's own list) divides the GPU's compute time (model.py `_framework_speed`) of every
    H100 offer, one GPU on one node included. A row of several nodes says nothing of one GPU's compute unless the
    fit places it (calibrate --mine refits with the row's own scenario; compare does not)."""
    monkeypatch.setenv("GPUFLEET_MEASURED", str(tmp_path / "measured.json"))
    before = _offers("H100", "llm:1b")
    w = measured.bench_workload("llm:1b")
    job = predict(measured.scenario(w, cat.gpu("H100"), 1, gpus_per_node=8, nodes=2)).per_gpu
    measured.add([measured.Measured(gpu="H100", workload="llm:1b", family="llm", unit="tok/s", measured=job / 2,
                                    predicted=job, batch=1, when="2026-11-20T10:00:00Z", host="node-1", gpus=16,
                                    nodes=2)])
    after = _offers("H100", "llm:1b")
    one = min(after, key=lambda k: after[k]["gpus_per_node"] * after[k]["nodes"])
    assert after[one]["gpus_per_node"] * after[one]["nodes"] == 1
    assert after[one]["throughput"] == pytest.approx(before[one]["throughput"], rel=0.05), (
        f"one H100 now predicted at {after[one]['throughput'] / before[one]['throughput']:.2f}x from a 2-node job")
    doc = json.loads(cli("--json", "compare", "llm:1b", "--gpu", "H100", "--top", "1").stdout)
    said = [a for a in doc["assumptions"] if a.startswith("measured: H100 rows not applied")]
    assert said and "2 nodes" in said[0], doc["assumptions"]


# ---- a row read back is checked for what it means --------------------------------------------------------------------

def test_one_row_of_a_gpu_this_catalog_lacks_leaves_the_others_usable(cat, tmp_path, monkeypatch):
    """Rows come from the team store, written by teammates whose catalogs may name other GPUs (config `gpus:`).
    calibration.mine_rows calls cat.gpu(m.gpu) for every row: one such row is NotFound and `calibrate --mine` ends
    (exit 2) for the whole team, naming no row and no store object."""
    good = _row(cat, "H200", "bert-large", 128, ratio=0.9)
    foreign = dataclasses.replace(good, gpu="MI355X-OAM")
    assert not cat.has_gpu("MI355X-OAM")
    skipped: dict[str, str] = {}
    rows = calibration.mine_rows([good, foreign], cat, skipped)
    assert [r.scenario.gpu.name for r in rows] == ["H200"]
    ((key, why),) = skipped.items()
    assert "MI355X-OAM" in key and "no GPU" in why


@pytest.mark.parametrize("change, why", [
    ({"gpus": 0}, "a job of no GPUs (mine_rows then makes a row of measured 0: log(0) in the fit)"),
    ({"batch": 0}, "a batch of no samples"),
    ({"nodes": 4, "gpus": 1}, "more nodes than GPUs"),
    ({"family": "cnn"}, "BERT-large's row filed under the CNNs: compare applies it to every CNN on this GPU"),
    ({"family": "video"}, "a family the model has not (workloads.FAMILIES)"),
    ({"workload": "not-a-workload"}, "a workload no catalog knows (mine_rows: NotFound for the whole team)"),
])
def test_a_row_read_back_is_checked_for_what_it_means_not_only_its_characters(cat, change, why):
    """Measured.from_dict (the check of every row read from the file or the team store) checks that words are
    printable and numbers finite and >= 0; it lets through rows that break or bend what uses them."""
    d = dataclasses.asdict(_row(cat, "H200", "bert-large", 128, ratio=0.9))
    with pytest.raises(ValueError):
        measured.Measured.from_dict({**d, **change})
        pytest.fail(f"accepted: {why}")

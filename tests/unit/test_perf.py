"""The performance model: calibrated against published runs, and behaving like the physics."""

import dataclasses
import json
from importlib import resources

import pytest

from gpufleet.errors import SpecError
from gpufleet.fleet import bench
from gpufleet.perf import architecture, calibration, measured, model, workloads
from gpufleet.perf.model import NAMES, PRIORS, Params, Scenario, error_band, fitted_params, predict, resolve_precision


def test_calibration_error_within_target_and_reported_per_row():
    rows = calibration.rows()
    s = calibration.summary(rows, fitted_params())
    print("\ncalibration per-row error:")
    for r in s["per_row"]:
        print(f"  {r['id']} {r['workload']:>15} {r['gpu']:>10} x{r['gpus']:<4} {r['error']:+.1%}")
    print(f"median |error| {s['median_abs_error']:.1%} single {s['median_abs_error_single_gpu']:.1%} "
          f"multi {s['median_abs_error_multi_gpu']:.1%} over {s['rows']} rows")
    assert s["rows"] == len(rows) >= 250
    assert {r["id"] for r in s["per_row"]} == {r.id for r in rows}
    # in sample; what matters is out of fold (below). Measured at the last calibration: 8.3%
    # overall, 7.3% single-GPU, 8.3% multi-GPU (19.5%, 23.6%, 19.3% before the framework and padding terms)
    assert s["median_abs_error"] <= 0.10
    assert s["median_abs_error_single_gpu"] <= 0.10
    assert s["median_abs_error_multi_gpu"] <= 0.10
    # the data spans generations, precisions, one GPU to hundreds of nodes, every family, many sources
    assert {r.scenario.gpu.arch for r in rows} >= {"kepler", "pascal", "volta", "ampere", "hopper"}
    assert {r.scenario.workload.family for r in rows} == {"cnn", "transformer", "llm"}
    assert max(r.scenario.nodes for r in rows) >= 256
    assert len({r.source for r in rows}) >= 10 and all(r.source in calibration.sources() for r in rows)


@pytest.mark.slow
def test_stored_parameters_are_the_fit_of_the_data_and_plausible():
    """fitted.json is what fit() produces from measurements.csv, not hand-tuned numbers; no parameter
    sits at a bound (the data did not have to push one past what its prior finds plausible)."""
    stored = json.loads(resources.files("gpufleet.perf").joinpath("data", "fitted.json").read_text())
    rows = calibration.rows()
    params, objective = calibration.fit(rows)
    assert objective == pytest.approx(stored["objective"], rel=0.02)
    for k in NAMES:
        assert params.values[k] == pytest.approx(stored["params"][k], rel=0.05), k
    assert calibration.warnings(fitted_params()) == []
    assert 0.5 <= params.net_eff <= 0.95  # NCCL reaches ~70-85% of line rate, not 99.6%
    at_bound = Params({**params.values, "net_eff": 0.95})
    assert calibration.warnings(at_bound) == ["net_eff = 0.95 is at its bound (0.5..0.95)"]


@pytest.mark.slow
def test_fit_recovers_known_parameters():
    """Rows generated from known parameters are fitted back to them (the fitter works)."""
    rows = calibration.rows()
    truth = Params({**fitted_params().values, "u_tensor:ampere": 0.4, "u_simt": 0.5})
    synthetic = [dataclasses.replace(r, measured=predict(r.scenario, truth).throughput) for r in rows]
    params, objective = calibration.fit(synthetic)
    assert objective < 0.02
    assert params.values["u_tensor:ampere"] == pytest.approx(0.4, rel=0.1)
    assert params.u_simt == pytest.approx(0.5, rel=0.1)


def test_out_of_fold_errors_are_stored_and_under_the_bar():
    """Generalisation, as stored by the last calibration (`python -m gpufleet.perf.calibration
    --write` recomputes it: every row predicted by a fit that did not see its source, its workload,
    its GPU). The figures are in the closing note of issue 20."""
    oof = json.loads(resources.files("gpufleet.perf").joinpath("data", "fitted.json").read_text())["out_of_fold"]
    rows = {r.id for r in calibration.rows()}
    for by in ("source", "workload", "gpu", "generation", "family"):
        assert set(oof["per_row"][by]) == rows, by
    # issue 20's bar is 15% (it asked the suite to fail above 25%); at the last calibration, and
    # before the framework and padding terms:
    assert oof["median_by_source"] <= 0.15  # grouped k-fold by source: 10.6% (23.6%)
    assert oof["median_by_gpu"] <= 0.15  # leave one GPU out: 13.9% (23.3%)
    assert oof["median_by_workload"] <= 0.15  # leave one workload out: 13.9% (33.6%)
    # issue 52's bar: a GPU generation the fit never saw, 14.6% at the last calibration (Volta 19.7%, Hopper 15.7%)
    assert oof["median_by_generation"] <= 0.15
    # a whole family left out (no CNN, no encoder or no LLM row in the fit): 21.1%, reported, no bar
    assert oof["median_by_family"] > 0 and set(oof["per_group"]["family"]) == {"cnn", "transformer", "llm"}
    assert error_band("cnn", True) == oof["bands"]["cnn:multi"] > 0


def test_worst_groups_name_the_group_predicted_worst_and_its_direction():
    """Issue 52: `calibrate` names the groups predicted worst out of fold, and whether too fast or too slow."""
    rows = calibration.rows()
    pascal = {r.id for r in rows if r.scenario.gpu.arch == "pascal"}
    assert pascal
    by_generation = {r.id: (1.5 if r.id in pascal else 0.05) for r in rows}
    by_family = {r.id: (-0.4 if r.scenario.workload.family == "cnn" else 0.02) for r in rows}
    worst = calibration.worst_groups(rows, {"generation": by_generation, "family": by_family}, n=2)
    assert [(g["by"], g["group"]) for g in worst] == [("generation", "pascal"), ("family", "cnn")]
    assert worst[0]["rows"] == len(pascal) and worst[0]["median_error"] == pytest.approx(1.5)
    assert worst[1]["median_error"] == pytest.approx(-0.4) and worst[1]["median_abs_error"] == pytest.approx(0.4)
    # a workload of one row predicted 10x too fast is a row, not a group the model misses
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.scenario.workload.name] = counts.get(r.scenario.workload.name, 0) + 1
    lone = next(name for name, k in counts.items() if k == 1)
    by_workload = {r.id: (9.0 if r.scenario.workload.name == lone else 0.01) for r in rows}
    assert all(g["group"] != lone for g in calibration.worst_groups(rows, {"workload": by_workload}))


def test_one_fold_is_predicted_by_a_fit_without_it():
    """out_of_fold really leaves the group out: a fit on the other sources alone predicts DLE-RN50."""
    rows = calibration.rows()
    oof = calibration.out_of_fold([r for r in rows if r.source in ("DLE-RN50", "TF-BENCH", "MLPerf-T-v2.0")],
                                  "source", start=fitted_params())
    stored = json.loads(resources.files("gpufleet.perf").joinpath("data", "fitted.json").read_text())
    in_sample = dict(zip([r.id for r in rows], calibration.errors(rows, fitted_params())))
    m01 = oof["m01"]
    assert m01 != pytest.approx(in_sample["m01"], abs=1e-6)  # a different fit predicted it
    assert set(oof) == {r.id for r in rows if r.source in ("DLE-RN50", "TF-BENCH", "MLPerf-T-v2.0")}
    assert stored["out_of_fold"]["per_row"]["source"]["m01"] is not None


def _s(cat, wl="resnet50", gpu="A100-80GB", **kw):
    return Scenario(workload=workloads.get(wl), gpu=cat.gpu(gpu), **kw)


def test_llm_flops_follow_6nd(cat):
    w = workloads.get("llm-7b")  # causal attention: 6 L d s, as perf/model.py times the step (rev52 finding 8)
    assert w.train_flops == pytest.approx(6 * w.matmul_params + 6 * w.layers * w.d_model * w.seq_len)
    custom = workloads.get("llm:65b")  # a size the library has no model of (llm:70b:2048 is llm-70b: issue 16)
    assert custom.params == 65e9 and custom.train_flops > 6 * custom.matmul_params
    assert workloads.get("resnet50").train_flops == pytest.approx(3 * 2 * 4.09e9, rel=0.01)


def test_bench_mfu_counts_the_flops_the_model_counts_for_the_same_step(cat):
    """One FLOP count for a decoder (rev52 finding 8): bench's MFU is measured x Workload.train_flops / peak, and the
    model's FLOPs of the same step are 6N + 6 L d s a token: N the weights a token multiplies (an untied input
    embedding is a lookup, as torchtitan counts), causal attention (FlashAttention skips the masked half; the
    model's time adds its backward's recomputation, which MFU does not count). Before, train_flops counted full
    attention (12 L d s): llm:1b's MFU at 8,192 tokens was 18% above the model's own count; and then llm:8b's
    counted its 525M-parameter input table."""
    w = measured.bench_workload("llm:8b")
    answer = {"device": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "gpus": 1, "gpus_used": 1},
              "versions": {"torch": "2.11.0+cu130"},
              "results": [{"name": "llm:8b", "kind": "decoder", "batch": 1, "step_s": 1.0, "samples_per_s": 8192.0}]}
    (row,) = bench.judge(answer, cat, "H100", tiny=False).rows
    assert not w.tied and w.matmul_params == pytest.approx(w.params - w.vocab * w.d_model)
    model_flops = 6.0 * w.matmul_params + 6.0 * w.layers * w.d_model * w.seq_len
    assert row.mfu == pytest.approx(8192.0 * model_flops / (cat.gpu("H100").tflops["bf16"] * 1e12), rel=0.01), (
        f"MFU {row.mfu:.3f} from {w.train_flops / 1e9:.2f} GFLOP a token; the model counts {model_flops / 1e9:.2f}")


@pytest.mark.parametrize("name", ["llm:1m", "llm:100m", "llm:1b", "llm:8b", "llm:70b"])
def test_full_recomputation_never_makes_a_step_faster(cat, name):
    """Recomputation adds the blocks' forward (review rev52 11): a nominal size below its own embedding table
    (llm:1m's 128k x 64, tied) must add nothing of its weights, not take their forward off the step."""
    s = Scenario(workload=workloads.get(name), gpu=cat.gpu("H100"), gpus_per_node=8, layout="fsdp",
                 global_batch_tokens=2.0**22)
    again = dataclasses.replace(s, layout="fsdp +recompute")
    assert predict(again).throughput < predict(s).throughput


def test_an_untied_input_embedding_is_a_lookup_not_6n():
    """An untied decoder's input embedding is a table lookup: no token multiplies it, so 6N leaves it out
    (torchtitan's get_nparams_and_flops subtracts the nn.Embedding parameters; Megatron's count has the output
    layer only). A tied one is also the output layer, a matrix every token multiplies. Before, llm:8b's 6N
    counted its 525M-parameter table: its MFU and its predicted step were 6% too high."""
    shape = {"params": 8.03e9, "layers": 32, "d_model": 4096, "heads": 32, "kv_heads": 8, "ffn": 14336,
             "gated": True, "vocab": 128256, "seq_len": 8192}
    untied = workloads.decoder("untied", {**shape, "tied": False}, "<test>")
    tied = workloads.decoder("tied", {**shape, "tied": True}, "<test>")
    assert untied.matmul_params == pytest.approx(8.03e9 - 128256 * 4096) and tied.matmul_params == 8.03e9
    assert tied.train_flops - untied.train_flops == pytest.approx(6 * 128256 * 4096)
    assert workloads.get("llm:8b").matmul_params < workloads.get("llm:8b").params  # Llama 3.1 8B is untied
    with pytest.raises(SpecError, match=r"input embedding") as e:  # review rev52 11: it went negative, quietly
        workloads.decoder("tiny", {**shape, "params": 4e8, "tied": False}, "mine.yaml")
    assert e.value.hint and "tied: true" in e.value.hint


@pytest.mark.parametrize("name", architecture.NAMES)
def test_layer_shapes_give_the_published_flops(name):
    """The architectures written out layer by layer give the multiply-accumulates their papers and
    torchvision publish (workloads.yaml's gmacs_fwd), so their activations can be trusted too."""
    import yaml

    published = yaml.safe_load(resources.files("gpufleet.perf").joinpath("data", "workloads.yaml").read_text())
    shape = architecture.cnn(name)
    assert shape.macs / 1e9 == pytest.approx(published[name]["gmacs_fwd"], rel=0.06)
    assert workloads.get(name).activations == shape.activations > 0


def test_memory_bound_cnn_gains_less_than_peak_from_h100(cat):
    a = predict(_s(cat, gpu="A100-80GB", synthetic_data=True)).throughput
    h = predict(_s(cat, gpu="H100", synthetic_data=True)).throughput
    peak_ratio = cat.gpu("H100").tflops["bf16"] / cat.gpu("A100-80GB").tflops["bf16"]
    assert 1.0 < h / a < peak_ratio


def test_scaling_and_network_bottleneck(cat):
    kw = dict(gpus_per_node=8, synthetic_data=True, batch_per_gpu=32)
    fast = [predict(_s(cat, "vgg16", nodes=n, network_gbps=400, **kw)) for n in (1, 2, 4)]
    assert fast[0].throughput < fast[1].throughput < fast[2].throughput
    slow = predict(_s(cat, "vgg16", nodes=4, network_gbps=1, **kw))
    assert slow.bottleneck == "network"
    assert slow.scaling_efficiency < fast[2].scaling_efficiency <= 1.0


def test_input_pipeline_bottlenecks(cat):
    cpu = predict(_s(cat, "alexnet", gpus_per_node=8, vcpus=8))
    assert cpu.bottleneck == "cpu"
    slow_disk = predict(_s(cat, "resnet50", gpus_per_node=8, vcpus=256, storage_mbps=50, node_memory_gib=16))
    assert slow_disk.bottleneck == "storage"
    # the same disk is only a first-epoch limit once the dataset fits in the page cache
    cached = predict(_s(cat, "resnet50", gpus_per_node=8, vcpus=256, storage_mbps=50, node_memory_gib=1024))
    assert cached.bottleneck == "compute" and cached.throughput_first_epoch < cached.throughput


def test_model_that_does_not_fit_is_flagged(cat):
    p = predict(_s(cat, "llm-70b", gpu="A100-40GB"))
    assert not p.feasible and p.bottleneck == "memory-capacity" and "no layout of llm-70b on 1 x A100-40GB" in p.reason
    assert predict(_s(cat, "llm-70b", gpu="A100-40GB", gpus_per_node=8, nodes=8)).feasible


def test_user_workload_file(write):
    path = write("w.yaml", "mynet: {family: cnn, params: 1.0e7, gmacs_fwd: 2.0, dataset_samples: 1000}\n")
    w = workloads.get("mynet", path)
    assert w.train_flops == pytest.approx(12e9) and w.unit == "img"
    bad = write("b.yaml", "mynet:\n  family: rnn\n")
    with pytest.raises(SpecError) as ei:
        workloads.get("mynet", bad)
    assert "rnn" in ei.value.message and ei.value.path == bad


def test_scaling_curves_bend_where_measurements_bend(cat):
    """Latency per bucket and hop, and waiting for the slowest of n GPUs: efficiency falls with size,
    and more slowly on a faster network."""
    def eff(nodes, gbps):
        return predict(_s(cat, "resnet50", gpu="H100", gpus_per_node=8, nodes=nodes, network_gbps=gbps,
                          synthetic_data=True)).scaling_efficiency
    curve = [eff(n, 400) for n in (1, 2, 8, 64, 512)]
    # 4,096 GPUs: 0.91 at the last calibration (MLPerf's ResNet-50 at 3,584 H100s runs 18% under the model)
    assert curve[0] > curve[1] > curve[2] > curve[3] > curve[4] and curve[4] < 0.93
    assert eff(64, 3200) > eff(64, 100)


def test_clustar_better_networking_helps_communication_heavy_models_most(cat):
    """CLUSTAR (seed talk): 40 Gbps networking sped up parameter-server training of LR 2.59x, an MLP
    3.45x, AlexNet 1.6x, VGG-16 1.33x, ResNet-50 1.03x. The model gives the same order, ResNet-50
    barely any gain. The talk gives neither the LR and MLP sizes (workloads.yaml assumes them) nor
    the batch sizes: all run at 128 per GPU here (with the library's default batches, 512 for
    AlexNet and 64 for VGG-16, those two come out close: 2.2x and 2.3x)."""
    def speedup(wl):
        kw = dict(gpus_per_node=1, nodes=8, comm="ps", synthetic_data=True, gpu="P100", batch_per_gpu=128)
        return (predict(_s(cat, wl, network_gbps=40, **kw)).throughput
                / predict(_s(cat, wl, network_gbps=10, **kw)).throughput)
    s = {w: speedup(w) for w in ("logreg", "mlp", "alexnet", "vgg16", "resnet50")}
    print({k: round(v, 2) for k, v in s.items()})
    assert s["mlp"] > s["logreg"] > s["alexnet"] > s["vgg16"] > s["resnet50"]
    assert s["resnet50"] < 1.15


def test_llms_are_split_as_people_train_them(cat):
    """A 70B model on 64 nodes of 8 H100s: tensor parallelism inside the node with sharding across, at a
    model FLOPs utilisation inside the published range (Llama 3 405B: 38-43% BF16 MFU on H100, "The Llama 3
    Herd of Models" 2024, table 4; Megatron-LM's weak-scaling table: 41-49% on H100); forced onto FSDP
    alone it needs full recomputation and is slower; a small model on one node stays FSDP; a model that
    no layout fits is flagged. (tests/unit/test_llm_layouts.py has the rest of issue 34.)"""
    big = predict(_s(cat, "llm:70b", gpu="H100", gpus_per_node=8, nodes=64, network_gbps=3200))
    assert big.layout.startswith("tp") and big.bottleneck == "compute", big.layout
    fsdp = predict(_s(cat, "llm:70b", gpu="H100", gpus_per_node=8, nodes=64, network_gbps=3200, layout="fsdp"))
    assert not fsdp.feasible and "needs" in fsdp.reason  # 8k-token activations of 80 layers do not fit
    forced = predict(_s(cat, "llm:70b", gpu="H100", gpus_per_node=8, nodes=64, network_gbps=3200,
                        layout="fsdp +recompute"))
    assert forced.feasible and big.throughput > forced.throughput
    mfu = big.per_gpu * workloads.get("llm:70b").train_flops / (cat.gpu("H100").tflops["bf16"] * 1e12)
    assert 0.30 <= mfu <= 0.60, mfu
    assert predict(_s(cat, "llm-7b", gpu="H100", gpus_per_node=8, network_gbps=3200)).layout == "fsdp dp8"
    none = predict(_s(cat, "llm:70b", gpu="A100-40GB", gpus_per_node=8))
    assert not none.feasible and "no layout of llm:70b on 8 x A100-40GB fits" in none.reason
    huge = predict(_s(cat, "llm:405b", gpu="H100", gpus_per_node=8, nodes=128, network_gbps=3200))
    assert huge.feasible and "recompute" in huge.layout  # 405B activations do not fit otherwise


def test_framework_is_measured_not_assumed(cat):
    """DeepLearningExamples publish BERT-large on the same DGX A100 in PyTorch and in TensorFlow 2:
    TensorFlow's rows are slower, and the fit (one speed per framework, relative to PyTorch) says so;
    a prediction for TensorFlow is PyTorch's GPU time divided by that speed."""
    rows = calibration.rows()

    def measured(source, prec):
        return [r.measured for r in rows if r.source == source and r.scenario.workload.name == "bert-large"
                and r.scenario.gpu.name == "A100-80GB" and r.scenario.precision == prec
                and r.scenario.gpus_per_node == 8 and r.scenario.nodes == 1]
    for prec in ("mixed", "tf32"):
        (pt,), (tf2,) = measured("DLE-PT-BERT", prec), measured("DLE-TF2-BERT", prec)
        assert tf2 < pt, prec
    p = fitted_params()
    assert p.values["fw:tf2"] < 1.0 and p.values["fw:tf1"] < 1.0
    assert {r.scenario.framework for r in rows} == {"pytorch", "tf1", "tf2", "paddle", "mxnet", "megatron"}
    one = dict(gpu="A100-80GB", synthetic_data=True)
    torch, tf1 = predict(_s(cat, **one)), predict(_s(cat, framework="tf1", **one))
    assert tf1.throughput == pytest.approx(torch.throughput * p.values["fw:tf1"], rel=1e-9)


def test_a_measurement_with_an_unknown_framework_is_refused(monkeypatch):
    text = calibration._text("measurements.csv").replace(",tf2,DLE-TF2-BERT,", ",tensorflow2,DLE-TF2-BERT,", 1)
    monkeypatch.setattr(calibration, "_text", lambda name: text)
    with pytest.raises(ValueError, match="framework 'tensorflow2' is not one of pytorch, tf1"):
        calibration.rows()


def test_llms_keep_attention_scores_out_of_memory_bert_does_not():
    """LLM trainers use FlashAttention (no seq x seq scores in GPU memory); BERT's implementations of
    DeepLearningExamples' era write them (Korthikanti et al.'s 5·a·s bytes per token and layer)."""
    llm = workloads.get("llm-7b")
    assert llm.activations == pytest.approx(llm.layers * 17 * llm.d_model)
    bert = workloads.get("bert-large-512")
    per_token = architecture.transformer_activations(24, 1024, 512)
    assert bert.activations == pytest.approx(per_token * 512)
    assert per_token > architecture.transformer_activations(24, 1024, 512, flash=True) == 24 * 17 * 1024


def test_sequence_binning_is_why_bert_phase_2_runs_near_peak(cat):
    """PyTorch's and PaddlePaddle's BERT phase 2 (LDDL sequence binning) would run at more than half
    the tensor cores' peak if every sequence were 512 tokens, and above a V100's FP32 peak, where
    TensorFlow's (padded) runs reach at most 35% on tensor cores: the binned loader computes fewer
    tokens, and the fit says how many."""
    def padded_mfu(r):
        s = r.scenario
        peak = s.gpu.tflops[resolve_precision(s.gpu, s.precision)] * 1e12
        return r.measured * s.workload.train_flops / (s.gpus_per_node * s.nodes * peak)
    phase2 = [r for r in calibration.rows() if r.scenario.workload.name == "bert-large-512"]
    tensor = {b: [padded_mfu(r) for r in phase2 if r.scenario.sequence_binning == b and r.scenario.precision != "fp32"]
              for b in (True, False)}
    assert min(tensor[True]) > 0.5 > 0.4 > max(tensor[False])
    assert min(padded_mfu(r) for r in phase2 if r.scenario.sequence_binning and r.scenario.precision == "fp32") > 1.0
    assert {r.scenario.framework for r in phase2 if r.scenario.sequence_binning} == {"pytorch", "paddle"}
    fill = fitted_params().values["bin_fill"]
    assert 0.3 < fill < 0.9
    one = dict(wl="bert-large-512", synthetic_data=True)
    assert (predict(_s(cat, sequence_binning=True, **one)).throughput
            == pytest.approx(predict(_s(cat, **one)).throughput / fill, rel=1e-9))


def test_many_narrow_convolutions_run_further_below_peak_than_a_few_wide_ones(cat):
    """Issue 52: a CNN's speed follows its layers' shapes, not only its FLOPs. Inception-v3's 95 layers (many of
    32-192 channels) spend more math time per FLOP than VGG-16's 16 (64-512 channels), by their GEMM widths."""
    p = fitted_params()

    def math_s_per_flop(name: str) -> float:
        s = _s(cat, name, "A100-80GB", precision="bf16", batch_per_gpu=64)  # tensor cores: no Winograd term
        return model._gpu_time_per_sample(s, p, "bf16", 64)[1] / s.workload.train_flops

    def narrow(name: str) -> float:
        return sum(share * (1 + p.conv_width / width) for share, width in architecture.cnn(name).gemm_widths)

    ratio = math_s_per_flop("inception3") / math_s_per_flop("vgg16")
    assert ratio > 1.05 and ratio == pytest.approx(narrow("inception3") / narrow("vgg16"), rel=1e-9)
    assert PRIORS["conv_width"][2][0] <= p.conv_width <= PRIORS["conv_width"][2][1]


def test_the_fitted_memory_passes_of_transformers_are_in_the_ranges_their_counts_give():
    """(review rev52, 11) Issue 52: "Keep the fitted parameters physical (each within its prior; no parameter doing
    another's job)". One act_passes:transformer served BERT and the decoder LLMs: 6.95 against a comment of "~2-4",
    which counted each kept activation's store alone. Beside the GEMMs' and FlashAttention's operands, a Llama layer
    moves ~3 passes of its kept activations where its kernels are fused, ~10 eager (an RMSNorm's fp32 steps), ~13-15
    with torchtitan's selective recomputation: a decoder's 3-15 (review rev52's count). An encoder without
    FlashAttention also writes and reads its seq x seq scores some ten times: 5-12 (model.py). The decoders' passes
    also carried the loss over a 128k vocabulary, now counted in bytes (LOSS_BYTES_PER_LOGIT: 4.6 MB a token, more
    than llm:8b's kept activations once). One value for both, with the loss counted apart, fitted 7.97 and took
    u_simt (through BERT's FP32 rows on V100) to its bound, 0.93; split (fit of 2026-11-28): the decoders' 6.96
    (the old shared value was 6.95: the recount, not the split, makes it physical), the encoders' 8.31, u_simt 0.90.
    Before the recount this test failed at 6.95 against "~2-4"; now it fails if a refit leaves the ranges."""
    from gpufleet.perf.model import ACT_PASSES, LOSS_BYTES_PER_LOGIT, fitted_params

    p = fitted_params().values
    assert ACT_PASSES["llm"] != ACT_PASSES["transformer"]
    assert 3.0 <= p[ACT_PASSES["llm"]] <= 15.0, p[ACT_PASSES["llm"]]
    assert 5.0 <= p[ACT_PASSES["transformer"]] <= 12.0, p[ACT_PASSES["transformer"]]
    w = workloads.get("llm:8b")
    assert w.vocab * LOSS_BYTES_PER_LOGIT > w.activations * 2  # bytes: the loss's against the activations' one pass


@pytest.mark.xfail(strict=True, reason="review rev52 11, open: attn_eff is below what FlashAttention's sources give; "
                   "the long-context rows (ring attention over 2-32 GPUs, FA2 in torchtitan, H100s at 500 W) carry "
                   "what the model does not place")
def test_the_fitted_attention_efficiency_is_in_the_range_its_sources_give():
    """(review rev52, 11) attn_eff: FlashAttention's share of peak relative to the weight GEMMs (FA2 50-73% of an
    A100's peak, Dao 2023; FA3 up to 75% of an H100's, Shah et al. 2024; prior 0.7). The attention time counts the
    backward's recomputation (FLASH_FWD_BWD 3.5, flash-attention's own benchmark): the fit of 2026-11-28 has 0.41
    (0.37 before), still FlashAttention at ~21% of an H100's peak where FA2 reaches 35% (Shah et al. 2024). llm:8b
    on 8 H100 at 8k/32k/128k tokens was predicted 1.13x/1.37x/1.65x slower than with attn_eff at its prior (run here
    before that change)."""
    from gpufleet.perf.model import fitted_params

    p = fitted_params().values
    assert p["attn_eff"] >= 0.5, f"attn_eff {p['attn_eff']:.3f}"

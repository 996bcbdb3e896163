"""An LLM setting that cannot be trained is refused or shown infeasible, never priced (issue 47, item
8): a sequence of 0 tokens, more pipeline stages than the model has layers, virtual pipeline stages
without a pipeline or that do not split the layers evenly. The rules are Megatron-LM's own
(megatron/training/arguments.py, validate_args: the layers, with the embedding and the loss if they
are counted in the split, divisible by the pipeline size, those of a stage by the virtual stage's;
read 2026-11)."""

import pytest

from gpufleet.errors import InputError
from gpufleet.perf import parallel, workloads
from gpufleet.perf.model import Scenario, predict

from conftest import cli


def test_a_sequence_of_no_tokens_is_refused():
    r = cli("compare", "llm:7b:0")
    assert r.exit_code == 2 and "llm:7b:0: the sequence length is at least 1 token" in r.output, r.output


def test_a_workload_file_llm_with_no_sequence_is_refused_at_its_key(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("mine: {family: llm, params: 7e9, seq_len: 0}\n")
    r = cli("compare", "mine", "--workload-file", str(f))
    assert r.exit_code == 2 and "mine.seq_len" in r.output and "at least 1 token" in r.output, r.output


@pytest.mark.parametrize("layout,nodes,said", [
    ("pp64", "8", "pp64 is more pipeline stages than llm-7b's 32 layers"),  # the issue's: shown at $137k
    ("pp128", "16", "pp128 is more pipeline stages than llm-7b's 32 layers"),
    ("tp2 vp4", "1", "vp4 (the interleaved schedule's virtual stages) needs a pipeline"),
    ("pp2 vp5", "1", "pp x vp = 10 chunks of equal size, and 32 layers are not a multiple of 10 (nor with"),
])
def test_an_impossible_layout_is_refused_with_its_reason(layout, nodes, said):
    r = cli("compare", "llm:7b:2048", "--layout", layout, "--nodes", nodes)
    assert r.exit_code == 2 and said in r.output and "Traceback" not in r.output, r.output


def test_a_pinned_layout_the_model_cannot_have_is_infeasible_not_priced(cat):
    w = workloads.get("llm:7b:2048")
    s = Scenario(workload=w, gpu=cat.gpu("H100"), gpus_per_node=8, nodes=8, network_gbps=3200, layout="pp64")
    pr = predict(s)
    assert not pr.feasible and "pp64 is more pipeline stages" in pr.reason, (pr.feasible, pr.reason)
    with pytest.raises(InputError, match="not a multiple"):
        parallel.parse("pp2 vp5", 16, 8, w)


@pytest.mark.parametrize("name", ["llm:7b", "llm:8b", "llm-7b", "llm:70b", "llm:405b", "llm-13b"])
@pytest.mark.parametrize("gpus", [8, 64, 512])
def test_every_candidate_layout_is_one_the_model_can_have(name, gpus):
    w = workloads.get(name)
    for lay in parallel.candidates(gpus, 8, w):
        assert lay.pp <= w.layers, (name, w.layers, lay.name)
        assert lay.vp == 1 or (lay.pp > 1 and any((w.layers + e) % (lay.pp * lay.vp) == 0 for e in (0, 1, 2))), \
            (name, w.layers, lay.name)

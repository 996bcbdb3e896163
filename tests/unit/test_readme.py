"""The README's own examples load, and those of its pages in docs/: every ```yaml block is a stack
file (it has `pools:`), a user config (`discounts`, `prices`, `sites`, `budgets`) or a stack's
`data:` or `monitoring:` block, and each is read the way gpufleet reads one. An example that goes stale fails here,
not in a reader's terminal."""

import re
import shutil

from gpufleet import catalog, config, stacks

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(page.relative_to(ROOT), block) for page in PAGES
          for block in re.findall(r"```yaml\n(.*?)```", page.read_text(), re.S)]


def test_the_docs_have_a_stack_and_a_config_example():
    kinds = [("pools:" in b, any(k in b for k in ("discounts:", "prices:", "sites:"))) for _, b in BLOCKS]
    assert (True, False) in kinds and (False, True) in kinds


def test_the_examples_moved_to_docs_are_still_read():
    """The README's reference parts, stack examples among them, live in docs/ now: their blocks are
    read here as the README's were."""
    pages = {str(page) for page, _ in BLOCKS}
    assert {"docs/stacks.md", "docs/capacity.md", "docs/spend.md", "docs/slurm.md", "docs/config.md"} <= pages


def test_every_yaml_block_of_the_docs_loads(tmp_path, monkeypatch):
    home = tmp_path / "home"  # the examples' ~/.ssh/id_ed25519.pub
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519.pub").write_text((ROOT / "stacks/examples/keys/example.pub").read_text())
    monkeypatch.setenv("HOME", str(home))
    for i, (page, block) in enumerate(BLOCKS):
        path = tmp_path / f"{page.stem}-block{i}.yaml"
        path.write_text(block)
        if "pools:" in block:
            st = stacks.load(path, catalog.load(use_config=False))
            assert st.pools
        elif block.startswith("data:"):  # a block of a stack: added to an example, it loads
            (tmp_path / "keys").mkdir(exist_ok=True)  # the key the example names, beside it
            shutil.copy(ROOT / "stacks/examples/keys/example.pub", tmp_path / "keys")
            path.write_text((ROOT / "stacks/examples/aws-training.yaml").read_text() + "\n" + block)
            assert stacks.load(path, catalog.load(use_config=False)).data.dataset_gb > 0
        elif block.startswith("monitoring:"):  # the same, for a stack's monitoring: block
            (tmp_path / "keys").mkdir(exist_ok=True)
            shutil.copy(ROOT / "stacks/examples/keys/example.pub", tmp_path / "keys")
            path.write_text((ROOT / "stacks/examples/aws-training.yaml").read_text() + "\n" + block)
            assert stacks.load(path, catalog.load(use_config=False)).monitoring.prometheus
        else:
            cat = catalog.load(path)  # the config applied: quotes, discounts, sites, budgets
            assert cat.prices and (cat.discounts or cat.sites or config.load(path).budgets)

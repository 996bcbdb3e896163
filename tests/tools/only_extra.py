"""Run the gpufleet CLI as if only one cloud's extra were installed: `python only_extra.py aws ARGS...`
(`none`: no extra at all, Pulumi hidden too, as after `pip install gpufleet`).

The other clouds' SDKs (and their Pulumi providers) are hidden from ``import`` by a meta path
finder, which raises ModuleNotFoundError for them as Python does for a package that is not
installed; everything else is the environment the test runs in. Installing each extra into a
fresh virtualenv would show the same at a few minutes of pip per extra.
"""

import importlib.abc
import sys

# what each extra installs (pyproject.toml) and nothing else needs, by import name (google.protobuf
# is pulumi's and grpc's, so only Google Cloud's own parts of the `google` namespace are its)
PACKAGES = {"aws": {"boto3", "botocore", "pulumi_aws"},
            "gcp": {"google.cloud", "google.auth", "google.api_core", "google.oauth2", "pulumi_gcp"},
            "azure": {"azure", "pulumi_azure_native"}}


class Hidden(importlib.abc.MetaPathFinder):
    def __init__(self, hidden: set[str]):
        self.hidden = hidden

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == h or fullname.startswith(h + ".") for h in self.hidden):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main() -> None:
    extra, args = sys.argv[1], sys.argv[2:]
    hidden = set().union(*(v for k, v in PACKAGES.items() if k != extra))
    if extra == "none":  # every extra brings Pulumi
        hidden |= {"pulumi"}
    sys.meta_path.insert(0, Hidden(hidden))
    sys.argv = ["gpufleet", *args]
    from gpufleet.cli.app import main as cli

    cli()


if __name__ == "__main__":
    main()

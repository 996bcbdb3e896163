"""Package discovery for the one import package ``gpufleet``, built from several folders (see
pyproject.toml [tool.setuptools] package-dir): every package under infra/ ships, found rather
than listed, so that a new one cannot be left out of the wheel. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=["gpufleet", *(f"gpufleet.{p}" for p in find_packages("infra")), "gpufleet.cli", "gpufleet.states",
                "gpufleet.images", "gpufleet.examples"])

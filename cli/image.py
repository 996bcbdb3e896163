"""`gpufleet image`: golden machine images of a stack's pools, baked from the same Salt states."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpufleet.cli import options, output
from gpufleet.cli.output import STATE
from gpufleet.errors import EXIT_FAILED

Out = Annotated[str, typer.Option("--out", "-o", help="Where to write the bundles and variable files.")]
Container = Annotated[bool, typer.Option("--container", help="The pools' training container instead (images/Dockerfile: "
                                         "NCCL and the frameworks on NVIDIA's CUDA base), built by Docker or Podman.")]
CudaImage = Annotated[Optional[str], typer.Option("--cuda-image", help="With --container: the base image (default: "
                                                  "nvidia/cuda for the stack's CUDA and the pool's Ubuntu).")]

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                  help="Golden machine images of a stack's pools, baked by the nodes' own bootstrap.")

PLAN_HELP = ("Write, for each cloud pool of STACK, what its golden image is built from: a bake bundle (the state "
             "tree `up` publishes, the bake spec, the node agent and its bake mode) and the variable file of its "
             "cloud's Packer template under images/ (<pool>.<cloud>.pkrvars.json), with the `packer build` command "
             "that builds it. A node booting from such an image applies only its node states (mounts, fabric) "
             "while the image is its pool's; a variable the account must give (GCP project, Azure subscription) is "
             "named when it could not be read here.")


@app.command("plan", help=PLAN_HELP)
@output.handle_errors
def plan(
    stack: options.StackFile,
    pool: options.OnePool = None,
    out: Out = "build/images",
    expires: Annotated[Optional[str], typer.Option("--expires", help="Tag the images to expire this long after now "
                                                   "(e.g. 30d): `gpufleet reap` then deletes them. Default: kept "
                                                   "until `image delete`.")] = None,
    container: Container = False,
    cuda_image: CudaImage = None,
):
    from pathlib import Path

    from gpufleet import catalog, stacks
    from gpufleet.fleet import container_image, image

    cat = catalog.load(STATE.config)
    if container:
        boxes = container_image.plan(stacks.load(stack, cat), cat, Path(out), pool=pool, base=cuda_image)
        if STATE.json:
            output.emit_json({"containers": [m.to_dict() for m in boxes]})
            return
        output.table("Training containers to build (gpufleet records nothing until it is built)",
                     ["pool", "image", "base", "formulas baked"],
                     [[m.pool, m.name, m.args["CUDA_IMAGE"], ", ".join(m.states)] for m in boxes],
                     wraps=("formulas baked",), optional=("formulas baked", "base"))
        for m in boxes:
            output.console().print(f"{m.pool}: {m.command()}")
        return
    made = image.plan(stacks.load(stack, cat), cat, Path(out), pool=pool,
                      expires=options.duration("--expires", expires) or None)
    if STATE.json:
        output.emit_json({"images": [m.to_dict() for m in made]})
        return
    output.table("Golden images to build (packer build each; gpufleet records nothing until it is built)",
                 ["pool", "cloud", "image", "formulas baked", "variables"],
                 [[m.pool, m.provider, m.name, ", ".join(m.states), m.var_file] for m in made],
                 optional=("formulas baked", "cloud"), wraps=("formulas baked", "variables"))
    for m in made:
        output.console().print(f"{m.pool}: {m.command}")
        if m.unset:
            output.warn(f"{m.pool}: set {', '.join(m.unset)} in {m.var_file} (not known here without credentials)")


BUILD_HELP = ("Plan each cloud pool's golden image (as `image plan`), then run Packer on it: its progress as it "
              "comes, and each image built recorded in gpufleet's image manifest, so a pool may boot it as "
              "`image: gpufleet:<name>`. Needs Packer 1.10 or newer (not installed by gpufleet; GPUFLEET_PACKER "
              "names another binary): without it, exit 2 with the install hint. With --container: the pools' "
              "training containers, built by Docker or Podman (GPUFLEET_CONTAINER_BUILDER), their image IDs "
              "recorded. Exit 1 when a build fails.")


@app.command("build", help=BUILD_HELP)
@output.handle_errors
def build(
    stack: options.StackFile,
    pool: options.OnePool = None,
    out: Out = "build/images",
    expires: Annotated[Optional[str], typer.Option("--expires", help="Tag the images to expire this long after now "
                                                   "(e.g. 30d): `gpufleet reap` then deletes them. Default: kept "
                                                   "until `image delete`.")] = None,
    container: Container = False,
    cuda_image: CudaImage = None,
):
    from pathlib import Path

    from rich.markup import escape

    from gpufleet import catalog, stacks
    from gpufleet.fleet import container_image, image

    cat = catalog.load(STATE.config)
    err = output.console(stderr=True)
    tell = lambda p, text: err.print(f"[dim]{escape(p)}:[/dim] {escape(text)}", highlight=False)  # noqa: E731
    if container:
        made = container_image.build(stacks.load(stack, cat), cat, Path(out), pool=pool, base=cuda_image, tell=tell)
    else:
        made = image.build(stacks.load(stack, cat), cat, Path(out), pool=pool,
                           expires=options.duration("--expires", expires) or None, tell=tell)
    if STATE.json:
        output.emit_json({"built": [m.to_dict() for m in made]})
        return
    output.table("Golden images built (recorded; a pool boots one as image: gpufleet:<name>)",
                 ["pool", "cloud", "region", "name", "image"],
                 [[m.pool, m.provider, m.region, m.name, m.id] for m in made], optional=("region", "cloud"),
                 wraps=("image",))


LIST_HELP = ("List the golden images the clouds hold, found by their gpufleet:image tag (label on GCP), with their "
             "size and whether this machine's image manifest records them. Exit 1 when a cloud that should have been "
             "read could not be.")


@app.command("list", help=LIST_HELP)
@output.handle_errors
def list_images(provider: options.Providers = None, region: options.Regions = None):
    from gpufleet.cli.lifecycle import exit_if_unread, warn_unread
    from gpufleet.fleet import image

    with output.steps("Asking the clouds for golden images"):
        found = image.listed(options.clouds(provider), region)
    warn_unread(found.clouds, found.unread)
    if STATE.json:
        output.emit_json(found.to_dict())
    else:
        output.table("Golden images", ["name", "cloud", "region", "image", "GB", "created", "recorded here"],
                     [[i.name, i.provider, i.region, i.id, f"{i.size_gb:g}" if i.size_gb else "-", i.created_at or "-",
                       "yes" if found.is_recorded(i) else "no"] for i in found.images],
                     optional=("region", "cloud", "recorded here", "created", "GB"), wraps=("image",),
                     justify={"GB": "right"})
    exit_if_unread(found.unread, found.clouds)


DELETE_HELP = ("Delete golden images with their snapshots (AWS keeps an AMI's EBS snapshots, and bills them, after "
               "it is deregistered), and drop them from the image manifest. TARGET is one build's id (as `image list` "
               "shows it), or an image's name: its older builds on every cloud that holds it, keeping the build pools "
               "naming gpufleet:<name> boot (the manifest's; else the newest) unless --all. A dry run unless --yes.")


@app.command("delete", help=DELETE_HELP)
@output.handle_errors
def delete(
    target: Annotated[str, typer.Argument(help="An image's name, or one build's id (as `image list` shows them).",
                                          metavar="TARGET")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete (default: a dry run).")] = False,
    every: Annotated[bool, typer.Option("--all", help="Also the build pools boot (they need a new build after).")] = False,
    provider: options.Providers = None,
    region: options.Regions = None,
):
    from gpufleet.cli.lifecycle import warn_unread
    from gpufleet.fleet import image

    with output.steps("Asking the clouds for golden images"):
        images, kept, removed, found = image.delete(target, yes=yes, every=every, providers=options.clouds(provider),
                                              regions=region)
    warn_unread(found.clouds, found.unread)
    failed = [r for r in removed if not r.ok]
    if STATE.json:
        output.emit_json({"deleted": yes, "images": [i.to_dict() for i in images], "kept": [i.to_dict() for i in kept],
                          "outcomes": [r.to_dict() for r in removed]})
    else:
        for i in images:
            verb = "would delete (run again with --yes)" if not yes else next(
                ("deleted" if r.ok else f"could not delete ({r.message})") for r in removed if r.image is i)
            output.console().print(f"{verb}: {i.provider} {i.region} {i.id}"
                                   + (f" and its snapshots {', '.join(i.snapshots)}" if i.snapshots else ""))
        for i in kept:
            output.console().print(f"kept (pools naming gpufleet:{i.name} boot it; --all deletes it too): "
                                   f"{i.provider} {i.region} {i.id}")
    if failed:
        raise typer.Exit(EXIT_FAILED)

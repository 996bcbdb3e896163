# A gpufleet golden image on GCP: a stock image family with the pool's formulas baked in by the
# same bootstrap the nodes run (node_bake.py). Variables: `gpufleet image plan STACK` writes them
# (<pool>.gcp.pkrvars.json); by hand: packer init images/gcp.pkr.hcl &&
# packer build -var-file=<pool>.gcp.pkrvars.json images/gcp.pkr.hcl
# Persistent disks and images are encrypted at rest by default (Google-managed keys).

packer {
  required_version = ">= 1.10.0"
  required_plugins {
    googlecompute = {
      source  = "github.com/hashicorp/googlecompute"
      version = "= 1.2.2"
    }
  }
}

variable "project_id" {
  type = string
}

variable "zone" {
  type = string
}

variable "machine_type" {
  type        = string
  description = "The builder; a GPU is not needed to install the driver, CUDA and NCCL packages"
}

variable "source_image_project_id" {
  type = string
}

variable "source_image_family" {
  type = string
}

variable "ssh_username" {
  type    = string
  default = "packer"
}

variable "image_name" {
  type = string
}

variable "image_family" {
  type        = string
  description = "Images of one pool form a family: the newest is the current one"
}

variable "root_disk_gb" {
  type    = number
  default = 100
}

variable "bundle_dir" {
  type        = string
  description = "The bake bundle: node_agent.py, node_bake.py, bake.json and the state tree"
}

variable "labels" {
  type        = map(string)
  description = "gpufleet-* labels on the image (labels allow no colons)"
}

variable "builder_labels" {
  type        = map(string)
  description = "The image's labels and a gpufleet-cluster on the builder, so `gpufleet reap` finds one a stopped build left"
}

source "googlecompute" "gpufleet" {
  project_id              = var.project_id
  zone                    = var.zone
  machine_type            = var.machine_type
  source_image_family     = var.source_image_family
  source_image_project_id = [var.source_image_project_id]
  ssh_username            = var.ssh_username
  image_name              = var.image_name
  image_family            = var.image_family
  disk_size               = var.root_disk_gb
  disk_type               = "pd-balanced"
  image_labels            = var.labels
  labels                  = var.builder_labels
  enable_vtpm                 = true
  enable_integrity_monitoring = true
}

build {
  sources = ["source.googlecompute.gpufleet"]

  # The file provisioner uploads a folder's contents into a folder that must already exist (Packer's
  # file provisioner docs): into a missing one, OpenSSH's scp sink writes each file onto that one path
  provisioner "shell" {
    inline = ["mkdir -m 0700 /tmp/gpufleet"]
  }

  provisioner "file" {
    source      = "${var.bundle_dir}/"
    destination = "/tmp/gpufleet"
  }

  provisioner "shell" {
    inline = [
      "sudo python3 /tmp/gpufleet/node_bake.py /tmp/gpufleet/bake.json",
      "sudo rm -rf /tmp/gpufleet",
    ]
  }
}

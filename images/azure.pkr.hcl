# A gpufleet golden image on Azure: a Marketplace image with the pool's formulas baked in by the
# same bootstrap the nodes run (node_bake.py), published as a version of a Compute Gallery image.
# Variables: `gpufleet image plan STACK` writes them (<pool>.azure.pkrvars.json); by hand:
# packer init images/azure.pkr.hcl && packer build -var-file=<pool>.azure.pkrvars.json images/azure.pkr.hcl
# Managed disks and gallery images are encrypted at rest by default (platform-managed keys).

packer {
  required_version = ">= 1.10.0"
  required_plugins {
    azure = {
      source  = "github.com/hashicorp/azure"
      version = "= 2.2.0"
    }
  }
}

variable "subscription_id" {
  type = string
}

variable "location" {
  type = string
}

variable "vm_size" {
  type        = string
  description = "The builder; a GPU is not needed to install the driver, CUDA and NCCL packages"
}

variable "image_publisher" {
  type = string
}

variable "image_offer" {
  type = string
}

variable "image_sku" {
  type = string
}

variable "plan_info" {
  type        = list(object({ plan_name = string, plan_product = string, plan_publisher = string }))
  default     = []
  description = "The base image's Marketplace plan, when it is sold with one (one element), else none"
}

variable "gallery_resource_group" {
  type = string
}

variable "gallery_name" {
  type = string
}

variable "gallery_image_name" {
  type        = string
  description = "The gallery image definition (one per pool); each build adds a version"
}

variable "image_version" {
  type        = string
  description = "major.minor.patch, e.g. 2026.1125.1"
}

variable "root_disk_gb" {
  type    = number
  default = 100
}

variable "bundle_dir" {
  type        = string
  description = "The bake bundle: node_agent.py, node_bake.py, bake.json and the state tree"
}

variable "tags" {
  type        = map(string)
  description = "gpufleet:* tags on the builder's resources and the image version (azure-arm has one set), with a gpufleet:cluster `gpufleet reap` finds a stopped build's builder by"
}

source "azure-arm" "gpufleet" {
  use_azure_cli_auth = true
  subscription_id    = var.subscription_id
  location           = var.location
  vm_size            = var.vm_size
  os_type            = "Linux"
  image_publisher    = var.image_publisher
  image_offer        = var.image_offer
  image_sku          = var.image_sku
  os_disk_size_gb    = var.root_disk_gb
  azure_tags         = var.tags

  # a Marketplace image sold with a plan is deployed only with it (the plan's terms accepted once per subscription)
  dynamic "plan_info" {
    for_each = var.plan_info
    content {
      plan_name      = plan_info.value.plan_name
      plan_product   = plan_info.value.plan_product
      plan_publisher = plan_info.value.plan_publisher
    }
  }

  shared_image_gallery_destination {
    subscription        = var.subscription_id
    resource_group      = var.gallery_resource_group
    gallery_name        = var.gallery_name
    image_name          = var.gallery_image_name
    image_version       = var.image_version
    replication_regions = [var.location]
  }
}

build {
  sources = ["source.azure-arm.gpufleet"]

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
      # Azure's own generalisation last: the Linux agent removes the builder's user and provisioning state
      "sudo /usr/sbin/waagent -force -deprovision+user && export HISTSIZE=0 && sync",
    ]
  }
}

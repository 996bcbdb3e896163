# A gpufleet golden image on AWS: a stock AMI with the pool's formulas baked in by the same
# bootstrap the nodes run (node_bake.py). Variables: `gpufleet image plan STACK` writes them
# (<pool>.aws.pkrvars.json); by hand: packer init images/aws.pkr.hcl &&
# packer build -var-file=<pool>.aws.pkrvars.json images/aws.pkr.hcl

packer {
  required_version = ">= 1.10.0"
  required_plugins {
    amazon = {
      source  = "github.com/hashicorp/amazon"
      version = "= 1.3.3"
    }
  }
}

variable "region" {
  type = string
}

variable "instance_type" {
  type        = string
  description = "The builder; a GPU is not needed to install the driver, CUDA and NCCL packages"
}

variable "source_ami_owner" {
  type = string
}

variable "source_ami_name" {
  type        = string
  description = "The newest AMI of this owner matching this name pattern is the base"
}

variable "ssh_username" {
  type        = string
  description = "The user the base AMI lets in (amazon-ebs has no default: ubuntu on Canonical's, rocky on the RESF's)"
}

variable "image_name" {
  type = string
}

variable "root_volume_gb" {
  type    = number
  default = 100
}

variable "bundle_dir" {
  type        = string
  description = "The bake bundle: node_agent.py, node_bake.py, bake.json and the state tree"
}

variable "tags" {
  type        = map(string)
  description = "gpufleet:* tags on the image and its snapshots (the stack, pool, owner and state tree)"
}

variable "builder_tags" {
  type        = map(string)
  description = "The image's tags and a gpufleet:cluster on the builder, so `gpufleet reap` finds one a stopped build left"
}

source "amazon-ebs" "gpufleet" {
  region        = var.region
  instance_type = var.instance_type
  ssh_username  = var.ssh_username
  ami_name      = var.image_name
  encrypt_boot  = true

  source_ami_filter {
    filters = {
      name                = var.source_ami_name
      architecture        = "x86_64"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = [var.source_ami_owner]
    most_recent = true
  }

  launch_block_device_mappings {
    device_name           = "/dev/sda1"
    volume_size           = var.root_volume_gb
    volume_type           = "gp3"
    encrypted             = true
    delete_on_termination = true
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  tags          = var.tags
  snapshot_tags = var.tags
  run_tags      = var.builder_tags
}

build {
  sources = ["source.amazon-ebs.gpufleet"]

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

"""What gpufleet remembers on this machine: the registry of clusters it brought up."""

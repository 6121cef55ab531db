"""Base and agents images for the sandboxes, built locally and tagged by a hash of their inputs."""

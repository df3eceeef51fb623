"""pylog's tuning rig: ext4/XFS/JBOD experiments on real filesystems (tuning/README.md)."""

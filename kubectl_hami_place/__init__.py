"""kubectl hami-place: pin, move and defragment GPU workloads on HAMi clusters."""

"""DeltaLog decode operators, one sub-package per recurrence (a PyTorch reference beside each Triton kernel)."""

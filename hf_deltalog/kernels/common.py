"""Constants shared by every DeltaLog operator."""

# Floor applied to every step's log-decay before it joins the cumulative log-decay. exp(-104) rounds to 0 in fp32
# (the smallest subnormal is exp(-103.3)), so the step decays exactly as the eager recurrence does, while a
# -inf or -1e4 gate can neither make the cumulative sums NaN nor so large that the differences exp(ℓ̄ − Λ_i) of later
# entries lose their precision to cancellation.
LOG_DECAY_FLOOR = -104.0

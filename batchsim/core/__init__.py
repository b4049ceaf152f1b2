"""The shared core: what both clocks run, line for line.

Workloads (arrivals, lengths, traces), the policies and the steps they decide, the
server's limits, the pass plan of a step, the driver loop, the records and the metrics.
Nothing here reads a clock of its own, prices a step or touches a model.
"""

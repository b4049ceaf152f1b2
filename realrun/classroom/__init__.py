"""realrun in the classroom: the class as the traffic (``serve``, an OpenAI-compatible server), a
load generator for it (``load``), batchsim's prediction of what the room sent (``predict``), and
notebook 7's lesson and panel (``lesson``, ``widgets``).

Above the engine, the clock, timing, judging and the references; only ``cli`` sits higher.
"""

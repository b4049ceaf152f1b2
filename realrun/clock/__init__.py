"""The wall clock: the simulator's own driver loop with a real engine (``runner``), a fleet of
engines taking turns (``fleet``), the memory a run took (``memory``), how long a run will last
(``real_span``) and the lines that say what a long run is doing (``progress``).

Above ``engine``; below everything that measures, judges or teaches with a run.
"""

"""Predicted against measured, and what may be concluded: the comparison (``compare``), one
policy's row of it (``row``), its table and figure (``table``, ``plot``), the verdicts by
tolerance and by equivalence (``verdict``, ``equivalence``), where one run should land
(``interval``), whether the policies' ranking held (``ranking``), where an error comes from
(``decompose``), and the line that decides (``bottom_line``).

Above ``timing``; it runs nothing itself.
"""

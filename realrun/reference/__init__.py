"""What our engine is held against: Hugging Face's own generation (``baselines``), vLLM, the
reference engine (``vllm``), and the course's shipped reference calibration and measurement
(``course``, files under ``data/``).

Above ``judge`` (vLLM's errors are decomposed as ours are); below ``classroom`` and ``cli``.
"""

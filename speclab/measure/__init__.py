"""Measurement: prompt sets (workloads), costs (profiling), side-by-side speed (bench), acceptance and
chi-square checks, batching under load. The model cards, which also read the training records, are
speclab.train.card; vLLM's CPU engine beside speclab is speclab.serving.vllm_cpu."""

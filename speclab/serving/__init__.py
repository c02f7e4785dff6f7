"""From speclab to a serving engine (part III, chapter 12).

    settings     one source for engine settings: a speclab method and its options as vLLM's
                 speculative_config, SGLang's and llama.cpp's flags, TensorRT-LLM's decoding config and
                 transformers' generate() arguments, or the reason an engine cannot express them
    checkpoints  speclab.methods.checkpoints under its serving name: heads in the layouts the engines load
    export       `python -m speclab export`: a method's trained weights written for an engine, with the
                 settings that serve them
    vllm_engine  vLLM beside speclab on the same target, prompts, weights and K (serving environment)
    vllm_cpu     speclab's fast path against vLLM's CPU engine, batch 1 (chapter 10; serving environment)
    load_test    a vLLM server under Poisson arrivals: throughput, time per token, acceptance counters
    rollout      the gate: promote or hold a configuration from the load test's measurements
"""

"""From speclab to a serving engine (part III, chapter 12).

    settings     one source for engine settings: a speclab method and its options as vLLM's
                 speculative_config, SGLang's and llama.cpp's flags, TensorRT-LLM's decoding config and
                 transformers' generate() arguments, or the reason an engine cannot express them
    checkpoints  heads in the layouts the engines load (vLLM's and SGLang's EAGLE-1 and EAGLE-3, vLLM's
                 Medusa): written from speclab's heads, and read back into them
    export       `python -m speclab export`: a method's trained weights written for an engine, with the
                 settings that serve them
    vllm_engine  vLLM beside speclab on the same target, prompts, weights and K (serving environment)
    load_test    a vLLM server under Poisson arrivals: throughput, time per token, acceptance counters
    rollout      the gate: promote or hold a configuration from the load test's measurements
"""

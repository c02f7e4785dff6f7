"""`python -m speclab.measure.vllm_cpu`, the command chapter 10's record names: the same module as
speclab.serving.vllm_cpu (speclab's fast path against vLLM's CPU engine), not a copy."""
import sys

from speclab.serving import vllm_cpu

if __name__ == "__main__":
    vllm_cpu.main()
sys.modules[__name__] = vllm_cpu

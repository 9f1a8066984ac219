"""`vllm.engine` of the stand-in: only `arg_utils.EngineArgs`."""

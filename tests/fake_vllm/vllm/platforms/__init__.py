"""`vllm.platforms.current_platform` of the stand-in: CUDA or CPU as ``$FAKE_VLLM_PLATFORM`` says."""

import os


class _Platform:
    device_type = os.environ.get("FAKE_VLLM_PLATFORM", "cpu")

    def is_cuda_alike(self) -> bool:
        return self.device_type == "cuda"

    def is_sleep_mode_available(self) -> bool:
        return self.device_type == "cuda"


current_platform = _Platform()

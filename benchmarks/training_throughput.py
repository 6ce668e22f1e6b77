"""Training throughput on CPU: SFT and GRPO steps of SmolLM2-135M-Instruct with LoRA, on SSA examples built from
the real Faithful-CoT GSM8K pool (k = 3 candidates cut to 64 tokens each, so prompts stay short).

    OMP_NUM_THREADS=2 python benchmarks/training_throughput.py [--threads 2] [--sft-steps 6] [--grpo-steps 3]

Prints tokens per second (prompt + completion tokens, as TRL's `num_tokens` counts them) and seconds per step.
The first step includes warm-up; the figures are whole-run averages, so more steps read a little faster.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from training.build import BuildConfig, build
from training.grpo import GRPOStepConfig, grpo
from training.modeling import ModelArguments
from training.sft import SFTStepConfig, sft


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sft-steps", type=int, default=6, help="0 skips SFT")
    p.add_argument("--grpo-steps", type=int, default=3, help="0 skips GRPO")
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        build(BuildConfig(sample_sets="faithful_cot:gpt4_COT,code002_COT,text003_COT", output_dir=str(data),
                          k_min=3, k_max=3, subsets_per_problem=1, max_candidate_tokens=64, hard_fraction=None,
                          validation_fraction=0.0, limit=32))  # fmt: skip
        common = {"data_dir": str(data), "logging_steps": 1, "save_steps": 10_000}
        model = ModelArguments(model_name_or_path="smollm2")
        if args.sft_steps:
            config = SFTStepConfig(
                **common, output_dir=f"{tmp}/sft", max_steps=args.sft_steps, per_device_train_batch_size=2
            )
            rows.append(("SFT, LoRA r=16, batch 2 (TRL's loss)", sft(config, model), args.sft_steps))
            # What the shipped SSA trains with: no padding (batch 1), the LM head on the answer tokens only.
            config = SFTStepConfig(**common, output_dir=f"{tmp}/sft1", max_steps=args.sft_steps * 2,
                                   per_device_train_batch_size=1, token_metrics=False)  # fmt: skip
            rows.append(("SFT, LoRA r=16, batch 1, answer tokens only", sft(config, model), args.sft_steps * 2))
        if args.grpo_steps:
            result = grpo(
                GRPOStepConfig(**common, output_dir=f"{tmp}/grpo", max_steps=args.grpo_steps, num_generations=4,
                               per_device_train_batch_size=4, max_completion_length=64),
                model,
            )  # fmt: skip
            rows.append(("GRPO, LoRA r=16, 4 generations x 64 tokens", result, args.grpo_steps))
    print(f"\nSmolLM2-135M-Instruct on CPU, {args.threads} threads")
    print(f"{'step':<44} {'tokens':>8} {'seconds':>8} {'tokens/s':>9} {'s/step':>7}")
    for name, result, steps in rows:
        tokens, seconds = result["num_tokens"], result["train_runtime"]
        print(f"{name:<44} {tokens:>8.0f} {seconds:>8.1f} {tokens / seconds:>9.1f} {seconds / steps:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

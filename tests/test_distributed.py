"""Distributed training for real on the CPU: `torchrun --nproc_per_node 2 aggregate-train sft|grpo …` runs two
processes in DDP over gloo, as a multi-GPU run does over NCCL. With the same global batch (2 × 2 × 1 against
1 × 2 × 2) and the data in order, the two-process run logs the same losses as one process; only the main process
writes the run's files (checked with an audit hook in every process; each process writes its own RNG state into a
checkpoint, from C++); the record says how many processes made the model; a run
stopped after a checkpoint resumes under two processes. The accelerate / DeepSpeed configs shipped for GPUs parse
with accelerate's own parsers.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training_fixtures import build_tiny_qwen2, corpus, toy_sample_sets
from training.cli import main

pytestmark = pytest.mark.slow
CONFIGS = Path(__file__).parents[1] / "training" / "configs"
TRAIN = Path(sys.executable).parent / "aggregate-train"
TORCHRUN = Path(sys.executable).parent / "torchrun"
# Every process marks that the hook is on, then records the files it opens for writing under the run's folder
# (Python's `open` audit event, `open()` and `os.open` alike: JSON records, tokenizer configs, copies). Writers in C++
# or Rust are not seen: torch.save's (the trainer's per-process RNG state, `rng_state_N.pth`, which each process
# writes for an exact resume) and safetensors' (the model, which the trainer writes from the main process).
AUDIT = """
import os, sys
if os.environ.get("AUDIT_WRITES_UNDER"):
    _rank = os.environ.get("RANK", "0")
    open(os.environ["AUDIT_WRITES_LOG"] + ".on." + _rank, "w").close()
    def _record(event, args, _under=os.environ["AUDIT_WRITES_UNDER"], _log=os.environ["AUDIT_WRITES_LOG"]):
        if event != "open" or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        mode, flags = args[1], args[2]
        writing = any(m in mode for m in "wax+") if isinstance(mode, str) else bool(
            flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
        path = os.fsdecode(os.fspath(args[0]))
        if writing and path.startswith(_under):
            with open(_log + "." + _rank, "a") as f:
                f.write(path + "\\n")
    sys.addaudithook(_record)
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("ddp")
    sets = toy_sample_sets(32)
    base = build_tiny_qwen2(root / "base", corpus(sets))
    pool = root / "sets.jsonl"
    pool.write_text("".join(s.model_dump_json() + "\n" for s in sets), encoding="utf-8")
    argv = ["build", "--sample_sets", str(pool), "--output_dir", str(root / "data"), "--k_min", "3", "--k_max", "5",
            "--subsets_per_problem", "4", "--validation_fraction", "0", "--max_prompt_tokens", "400",
            "--tokenizer", str(base)]  # fmt: skip
    assert main(argv) == 0
    # 8 examples: two global batches of 4 make an epoch whatever the split into processes and accumulation steps
    # (an epoch's ragged end is batched differently by one process and by two, which is not what is compared)
    train_file = root / "data" / "train.jsonl"
    rows = train_file.read_text(encoding="utf-8").splitlines(keepends=True)
    assert len(rows) >= 8
    train_file.write_text("".join(rows[:8]), encoding="utf-8")
    return base, root / "data"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def train(step: str, out: Path, processes: int, flags: list[str], audit: Path | None = None) -> str:
    """`aggregate-train STEP` in `processes` processes (torchrun when more than one); its stdout."""
    launcher = [str(TRAIN)]
    if processes > 1:
        launcher = [str(TORCHRUN), "--nproc_per_node", str(processes), "--master_port", str(free_port()), str(TRAIN)]
    # the CPU even where a GPU is: the 1-process baseline and the 2-process run on the same device, over gloo
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    if audit is not None:
        (audit / "sitecustomize.py").write_text(AUDIT)
        env |= {"PYTHONPATH": str(audit), "AUDIT_WRITES_UNDER": str(out), "AUDIT_WRITES_LOG": str(audit / "writes")}
    done = subprocess.run([*launcher, step, *flags, "--output_dir", str(out)], capture_output=True, text=True,
                          env=env, timeout=900)  # fmt: skip
    # the whole of stderr's end: a worker that aborts in C++ prints its reason before torchrun's own traceback
    assert done.returncode == 0, done.stderr[-8000:]
    return done.stdout


def losses(out: Path, key: str = "loss") -> list[float]:
    """What the newest checkpoint's training logs say at each step: the loss, or another `key`."""
    newest = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    history = json.loads((newest / "trainer_state.json").read_text())["log_history"]
    return [entry[key] for entry in history if "loss" in entry]


def sft_flags(base: Path, data: Path, per_device: int, accumulation: int) -> list[str]:
    return [
        "--model", str(base), "--data_dir", str(data), "--learning_rate", "1e-2", "--max_steps", "4",
        "--lora_r", "8", "--lora_alpha", "16", "--lora_dropout", "0.0", "--logging_steps", "1", "--save_steps", "2",
        "--seed", "0", "--report_to", "none", "--train_sampling_strategy", "sequential",
        "--per_device_train_batch_size", str(per_device), "--gradient_accumulation_steps", str(accumulation),
    ]  # fmt: skip


def test_two_process_sft_logs_the_losses_of_one_process_and_only_the_main_one_writes(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    base, folder = data
    train("sft", tmp_path / "one", 1, sft_flags(base, folder, 2, 2))
    audit = tmp_path / "audit"
    audit.mkdir()
    printed = train("sft", tmp_path / "two", 2, sft_flags(base, folder, 2, 1), audit=audit)
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(one) == len(two) == 4
    assert two == pytest.approx(one, rel=1e-4)  # the same global batches, the gradients all-reduced over gloo
    assert len(set(one)) > 1  # it trained: the loss moved
    for run, world_size in (("one", 1), ("two", 2)):
        record = json.loads((tmp_path / run / "training_step.json").read_text())
        assert (record["world_size"], record["global_batch_size"]) == (world_size, 4)
    assert printed.count('"world_size": 2') == 1  # one process reports for both
    assert (audit / "writes.on.0").exists() and (audit / "writes.on.1").exists()  # the hook ran in both
    written_by_main = (audit / "writes.0").read_text().splitlines()
    assert any(p.endswith("training_step.json") for p in written_by_main)
    assert any(p.endswith("tokenizer_config.json") for p in written_by_main)
    assert not (audit / "writes.1").exists()  # the second process opened nothing under the run's folder to write
    # Without TRL's token metrics (its own loss, the LM head on the trained positions only): the same losses and
    # token counts, so the gradients were synced and scaled as TRL's are
    train("sft", tmp_path / "answer", 2, [*sft_flags(base, folder, 2, 1), "--token_metrics", "false"])
    assert losses(tmp_path / "answer") == pytest.approx(one, rel=1e-4)
    assert losses(tmp_path / "answer", "num_tokens") == losses(tmp_path / "one", "num_tokens")


def test_a_two_process_run_resumes_from_its_checkpoint_and_grpo_runs_under_two_processes(
    data: tuple[Path, Path], tmp_path: Path
) -> None:
    base, folder = data
    out = tmp_path / "sft"
    train("sft", out, 2, sft_flags(base, folder, 2, 1))
    first = losses(out)
    shutil.rmtree(out / "checkpoint-4")  # stopped after step 2's checkpoint
    saved_2 = (out / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns
    train("sft", out, 2, sft_flags(base, folder, 2, 1))
    assert (out / "checkpoint-4").is_dir() and losses(out) == pytest.approx(first, rel=1e-4)
    assert (out / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns == saved_2  # resumed, not redone

    grpo = tmp_path / "grpo"
    train("grpo", grpo, 2, [
        "--model", str(base), "--adapter", str(out), "--data_dir", str(folder), "--num_generations", "4",
        "--per_device_train_batch_size", "4", "--max_completion_length", "16", "--max_steps", "1",
        "--learning_rate", "1e-4", "--logging_steps", "1", "--save_steps", "1", "--report_to", "none",
    ])  # fmt: skip
    record = json.loads((grpo / "training_step.json").read_text())
    assert (record["world_size"], record["global_batch_size"]) == (2, 8) and (grpo / "adapter_config.json").is_file()


MULTI_GPU_CONFIGS = sorted(p.name for p in CONFIGS.glob("*.yaml") if "distributed_type" in p.read_text())


@pytest.mark.parametrize("config", MULTI_GPU_CONFIGS)
def test_the_shipped_multi_gpu_configs_parse_with_accelerates_own_parsers(config: str) -> None:
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DeepSpeedPlugin, DistributedType

    cluster = load_config_from_file(str(CONFIGS / config))
    assert cluster.num_processes >= 8 and not cluster.use_cpu
    if cluster.distributed_type == DistributedType.DEEPSPEED:
        options = {k: v for k, v in cluster.deepspeed_config.items() if k != "deepspeed_multinode_launcher"}
        plugin = DeepSpeedPlugin(**options)  # accelerate's translation into DeepSpeed's own JSON config
        assert plugin.deepspeed_config["zero_optimization"]["stage"] == options["zero_stage"]
    else:
        assert cluster.distributed_type == DistributedType.MULTI_GPU

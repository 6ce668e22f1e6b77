"""The light training steps: SFT targets, build (subsets, hard mix, split by problem, teacher rejection sampling),
collect (policy over HTTP, resume, imports and the runtime's log), and the CLI's flag mapping."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.store.memory import InMemoryStore

from aggregate_graph import build_aggregate_graph
from aggregate_graph.aggregators.gsr import parse_gsr_output
from aggregate_graph.aggregators.ssa import parse_ssa_output
from aggregate_graph.jsonl import read_jsonl
from aggregate_graph.log import export_sample_sets, read_sample_sets
from aggregate_graph.reading.answers import equivalent
from tests.conftest import chat
from tests.training_fixtures import toy_sample_sets
from training.build import BuildConfig, build
from training.cli import main, parse
from training.collect import CollectConfig, collect
from training.targets import gsr_target, ssa_target


@pytest.mark.parametrize("answers", [["42", "13", "42"], ["13", "7"], [None, "42.0"]])
@pytest.mark.parametrize("gold", ["42", "\\frac{1}{2}"])
def test_programmatic_targets_parse_with_the_runtime_parsers(gold: str, answers: list[str | None]) -> None:
    ssa = parse_ssa_output(ssa_target(gold, answers))
    assert ssa.status == "parsed" and equivalent(ssa.answer, gold)
    assert equivalent(parse_gsr_output(gsr_target(gold, answers)), gold)


def write_sets(path: Path, problems: int = 16) -> Path:
    path.write_text("".join(s.model_dump_json() + "\n" for s in toy_sample_sets(problems)), encoding="utf-8")
    return path


def test_build_splits_by_problem_mixes_hard_sets_and_is_deterministic(tmp_path: Path) -> None:
    sets = write_sets(tmp_path / "sets.jsonl")
    config = BuildConfig(
        sample_sets=str(sets), output_dir=str(tmp_path / "a"), k_min=3, k_max=5, subsets_per_problem=6,
        hard_fraction=0.5, validation_fraction=0.25, seed=1,
    )  # fmt: skip
    summary = build(config)
    train, validation = (list(read_jsonl(tmp_path / "a" / f"{split}.jsonl")) for split in ("train", "validation"))
    assert not {r["problem"] for r in train} & {r["problem"] for r in validation}
    assert 1 <= summary["validation"]["problems"] <= 4 and summary["train"]["problems"] >= 4
    rows = train + validation
    assert {r["k"] for r in rows} <= {3, 4, 5} and len({r["k"] for r in rows}) > 1
    assert sum(r["hard"] for r in rows) == pytest.approx(len(rows) / 2, abs=1)
    for r in rows:
        assert r["prompt"][0]["role"] == "user" and "Below are the proposed answers:" in r["prompt"][0]["content"]
        assert parse_ssa_output(r["completion"][0]["content"]).answer == "42"
    # held-out sample sets are exactly the validation problems, for `evaluate`
    held = {s.question for s in read_sample_sets(tmp_path / "a" / "validation_sets.jsonl")}
    assert len(held) == 4 and held >= {r["problem"] for r in validation} and not held & {r["problem"] for r in train}
    build(BuildConfig(**{**config.__dict__, "output_dir": str(tmp_path / "b")}))
    for name in ("train.jsonl", "validation.jsonl"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()


def test_build_filters_long_prompts_and_writes_gsr(tmp_path: Path) -> None:
    sets = write_sets(tmp_path / "sets.jsonl", 4)
    summary = build(
        BuildConfig(sample_sets=str(sets), output_dir=str(tmp_path / "g"), format="gsr", k_min=3, k_max=3,
                    hard_fraction=None, max_prompt_tokens=150, validation_fraction=0.0)
    )  # fmt: skip
    assert summary["validation"]["examples"] == 0
    rows = list(read_jsonl(tmp_path / "g" / "train.jsonl"))
    assert rows and all(r["k"] == 3 and len(r["prompt"][0]["content"]) <= 600 for r in rows)
    assert all("Candidate solutions:" in r["prompt"][0]["content"] for r in rows)
    assert all(parse_gsr_output(r["completion"][0]["content"]) == "42" for r in rows)


def test_teacher_targets_keep_only_traces_that_reach_the_gold(tmp_path: Path, serve) -> None:
    tries: Counter[str] = Counter()

    def teacher(body: dict, sample_no: int) -> str:
        prompt = body["messages"][-1]["content"]
        if "The red fox" in prompt:  # never right: the example is dropped
            return "<think>Hmm.</think> <answer>13</answer>"
        # wrong on each example's first try, right on its second: counted per prompt, since the server's sample
        # numbers depend on the order concurrent requests arrive in
        tries[prompt] += 1
        return "<think>Check 6 * 7.</think> <answer>42</answer>" if tries[prompt] == 2 else "<answer>7</answer>"

    server = serve(teacher)
    sets = write_sets(tmp_path / "sets.jsonl", 3)
    summary = build(
        BuildConfig(sample_sets=str(sets), output_dir=str(tmp_path / "t"), subsets_per_problem=2, hard_fraction=None,
                    validation_fraction=0.0, targets="teacher", teacher_model="test-model",
                    teacher_base_url=server.base_url, teacher_samples=4, concurrency=2)
    )  # fmt: skip
    rows = list(read_jsonl(tmp_path / "t" / "train.jsonl"))
    assert summary["teacher_rejected"] == 2 and len(rows) == 4
    assert all(r["completion"][0]["content"] == "<think>Check 6 * 7.</think> <answer>42</answer>" for r in rows)
    assert not any(r["problem"].startswith("The red fox") for r in rows)


def test_collect_samples_with_the_graph_resumes_and_imports(tmp_path: Path, serve) -> None:
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        "".join(json.dumps({"question": f"What is {i} + 40?", "answer": f"{i} + 40\n#### {i + 40}"}) + "\n"
                for i in range(4)),
        encoding="utf-8",
    )  # fmt: skip
    server = serve(["So it is 42.\n#### 42", "I get 41.\n#### 41"])
    out = tmp_path / "collected.jsonl"
    config = CollectConfig(dataset=str(questions), output=str(out), model="test-model", base_url=server.base_url,
                           n=3, limit=2, concurrency=2)  # fmt: skip
    assert collect(config) == 2
    sets = list(read_sample_sets(out))
    assert [s.id for s in sets] == ["questions-0", "questions-1"] and [s.gold for s in sets] == ["40", "41"]
    assert all(len(s.candidates) == 3 and s.aggregation.method == "majority" for s in sets)
    assert {c.answer for s in sets for c in s.candidates} == {"42", "41"}
    calls = server.calls
    assert collect(config) == 0 and server.calls == calls  # finished questions are skipped
    assert collect(CollectConfig(**{**config.__dict__, "limit": None})) == 2 and len(list(read_sample_sets(out))) == 4

    # The data flywheel: the runtime's sample-set log, exported, is imported as it is (and only once).
    store = InMemoryStore()
    graph = build_aggregate_graph(chat(server), n=2, store=store)
    graph.invoke({"messages": [HumanMessage("What is 1 + 41?")]})
    exported = tmp_path / "log.jsonl"
    assert export_sample_sets(store, exported) == 1
    imported = tmp_path / "imported.jsonl"
    assert collect(CollectConfig(dataset=str(exported), output=str(imported))) == 1
    assert collect(CollectConfig(dataset=str(exported), output=str(imported))) == 0
    assert next(iter(read_sample_sets(imported))).question == "What is 1 + 41?"


def test_collect_imports_a_real_pool(tmp_path: Path) -> None:
    out = tmp_path / "pool.jsonl"
    assert collect(CollectConfig(dataset="qwen_math", output=str(out), limit=5)) == 5
    sets = list(read_sample_sets(out))
    assert len(sets) == 5 and all(len(s.candidates) == 8 and s.gold for s in sets)


@pytest.mark.usefixtures("restored_environment")
def test_cli_flags_are_the_config_fields(tmp_path: Path, capsys) -> None:
    assert main([]) == 2 and main(["--help"]) == 0 and "evaluate" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["build", "--help"])
    assert exit_.value.code == 0 and "--hard_fraction" in capsys.readouterr().out
    sets = write_sets(tmp_path / "sets.jsonl", 4)
    config = tmp_path / "build.yaml"
    config.write_text(f"sample_sets: {sets}\noutput_dir: {tmp_path / 'y'}\nk_min: 2\nk_max: 2\n", encoding="utf-8")
    assert main(["build", str(config)]) == 0
    assert json.loads((tmp_path / "y" / "build.json").read_text())["config"]["k_max"] == 2


@pytest.mark.parametrize(
    "name", ["accelerate_multi_gpu", "deepspeed_zero2", "deepspeed_zero3", "deepspeed_zero3_multinode"]
)
def test_scale_out_configs_load_in_accelerate(name: str) -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(Path("training/configs") / f"{name}.yaml")
    assert config.num_processes >= 8 and config.mixed_precision == "bf16"


def test_example_step_config_is_a_valid_sft_config() -> None:
    # TRL's own checks run as the file is read: bf16 needs a GPU, or use_cpu (given here as a flag after the file).
    config, model = parse("sft", ["training/configs/sft_ssa_example.yaml", "--use_cpu"])
    assert model.use_peft and config.bf16 and model.lora_r == 32


def sft_yaml(path: Path) -> Path:
    """A config file with the README's names (`model`, `use_lora`) beside TRL's."""
    path.write_text(
        "model: models/base\ndata_dir: runs/data\noutput_dir: runs/sft\nuse_lora: false\nmax_steps: 100\n"
        "learning_rate: 2.0e-4\nlora_r: 8\n",
        encoding="utf-8",
    )
    return path


def test_sft_reads_a_yaml_file_and_flags_together_flags_winning(tmp_path: Path) -> None:
    config_file = sft_yaml(tmp_path / "sft.yaml")
    # `aggregate-train sft cfg.yaml --max_steps 5` (the README's form) and TRL's `--config cfg.yaml`
    for argv in ([str(config_file), "--max_steps", "5"], ["--max_steps", "5", "--config", str(config_file)]):
        config, model = parse("sft", argv)
        assert config.max_steps == 5 and config.learning_rate == 2e-4 and config.output_dir == "runs/sft"
        assert model.model_name_or_path == "models/base" and not model.use_peft and model.lora_r == 8
    config, model = parse("sft", [str(config_file), "--use_lora", "--lora_r", "16", "--model", "models/other"])
    assert model.use_peft and model.lora_r == 16 and model.model_name_or_path == "models/other"
    # flags alone, with the project's defaults on top of TRL's
    config, model = parse("sft", ["--model", "m", "--data_dir", "d", "--output_dir", "o", "--eval_steps", "10"])
    assert (config.learning_rate, config.num_train_epochs, config.max_length, config.seed) == (1e-4, 1.0, 2048, 0)
    assert not config.bf16 and not config.gradient_checkpointing and config.per_device_eval_batch_size == 4
    assert config.assistant_only_loss and config.completion_only_loss and config.eval_strategy == "steps"
    assert model.use_peft and model.lora_target_modules == "all-linear" and model.lora_dropout == 0.0
    config, model = parse("grpo", ["--model", "m", "--data_dir", "d", "--output_dir", "o", "--no_use_lora"])
    assert (config.learning_rate, config.beta, config.max_completion_length) == (1e-5, 0.001, 1024)
    assert not model.use_peft and not config.remove_unused_columns


@pytest.mark.parametrize(
    ("step", "flags", "error"),
    [
        ("sft", ["--lora_r", "0"], "lora_r must be at least 1"),
        ("sft", ["--max_length", "0"], "max_length must be positive"),
        ("sft", ["--model", ""], "a base model is required"),
        ("grpo", ["--remove_unused_columns", "true"], "remove_unused_columns must stay false"),
        ("grpo", ["--num_generations", "3"], "must be divisible by num_generations"),  # TRL's own check
    ],
)
@pytest.mark.usefixtures("restored_environment")
def test_bad_values_fail_in_post_init_before_a_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, step: str, flags: list[str], error: str
) -> None:
    import training.grpo
    import training.sft

    def loading(*_: object, **__: object) -> None:
        raise AssertionError("a model or tokenizer was loaded before the config was checked")

    for module in (training.sft, training.grpo):
        monkeypatch.setattr(module, "load_model", loading)
        monkeypatch.setattr(module, "load_tokenizer", loading)
    assert main([step, str(sft_yaml(tmp_path / "sft.yaml")), *flags]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: ") and error in line


@pytest.mark.usefixtures("restored_environment")
def test_build_config_checks_its_values_when_made(capsys) -> None:
    assert main(["build", "--sample_sets", "missing.jsonl", "--output_dir", "out", "--k_min", "4", "--k_max", "3"]) == 2
    assert "k_min <= k_max" in capsys.readouterr().err


@pytest.mark.usefixtures("restored_environment")
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["weights", "--sample-sets", "/nope", "--output", "w.json"],
            "error: /nope: no such sample-set JSONL file, nor a pool name (faithful_cot, gpt3_solutions, qwen_math, "
            "zeroeval_build)\n",
        ),
        (
            ["weights", "/nope.yaml"],
            "error: config file /nope.yaml: no such file\nhint: the example configs are in the repository's "
            "training/configs/\n",
        ),
        (["weights", "--config"], "error: --config needs a file: --config CONFIG.yaml\n"),
        (
            ["weights", "{dir}/broken.yaml"],
            "error: config file {dir}/broken.yaml is not valid YAML: expected ',' or ']', but got '<stream end>' "
            "(line 2, column 1)\n",
        ),
        (
            ["weights", "{dir}/unknown.yaml"],
            "error: the config file has keys that aggregate-train weights does not know: sample_sets_file "
            "(`aggregate-train weights --help` lists them)\n",
        ),
        (
            ["weights", "--output", "w.json"],
            "error: the following arguments are required: --sample_sets/--sample-sets\n"
            "hint: `aggregate-train weights --help` lists the flags\n",
        ),
        (
            ["sft", "--model", "/nope-model", "--data_dir", "d", "--output_dir", "o"],
            "error: model /nope-model: not a transformers model folder (no config.json there); smollm2 is the "
            "embedded SmolLM2-135M-Instruct\n",
        ),
        (
            ["bogus"],
            "error: unknown step 'bogus'; the steps are collect, weights, build, sft, grpo, calibrate, evaluate, "
            "report, export\nhint: `aggregate-train --help` says what each does\n",
        ),
        (
            ["buidl"],
            "error: unknown step 'buidl'; the steps are collect, weights, build, sft, grpo, calibrate, "
            "evaluate, report, export\nhint: did you mean 'build'?\n",
        ),
    ],
)
def test_step_mistakes_are_told_in_a_line_or_two(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    (tmp_path / "broken.yaml").write_text("sample_sets: [a, b\n", encoding="utf-8")
    (tmp_path / "unknown.yaml").write_text("sample_sets_file: x\noutput: w.json\n", encoding="utf-8")
    argv = [arg.format(dir=tmp_path) for arg in argv]
    try:
        status = main(argv)
    except SystemExit as exit_:  # a usage mistake: argparse exits
        status = exit_.code
    assert status == 2
    captured = capsys.readouterr()
    assert captured.err == message.format(dir=tmp_path) and captured.out == ""


@pytest.mark.usefixtures("restored_environment")
def test_debug_lets_the_traceback_through(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["weights", "--sample-sets", "/nope", "--output", "w.json"]
    with pytest.raises(FileNotFoundError, match="/nope: no such sample-set JSONL file"):
        main(["--debug", *argv])
    monkeypatch.setenv("AGGREGATE_GRAPH_DEBUG", "1")
    with pytest.raises(FileNotFoundError):
        main(argv)


def test_pools_join_with_plus_but_a_config_named_nl_plus_sl_stays_one() -> None:
    from training.data import load_sample_sets

    joined = load_sample_sets("faithful_cot:gpt4_COT+gpt3_solutions", problems="unreserved")
    sources = {s.metadata["source"] for s in joined}
    assert len(sources) == 2 and len(joined) == 2 * 1055
    one = load_sample_sets("faithful_cot:code002_COT,code002_NL+SL", limit=3)
    assert [c.params["prompt"] for c in one[0].candidates] == ["COT", "NL+SL"]


def test_a_sample_set_file_joins_pools_with_plus(tmp_path: Path) -> None:
    from aggregate_graph.jsonl import write_jsonl
    from training.data import load_sample_sets

    mine = load_sample_sets("gpt3_solutions", limit=2)
    write_jsonl(tmp_path / "mine.jsonl", (s.model_dump(mode="json") for s in mine))
    joined = load_sample_sets(f"{tmp_path / 'mine.jsonl'}+zeroeval_build")
    assert [s.id for s in joined[:2]] == [s.id for s in mine]
    assert {s.metadata["source"] for s in joined[2:]} == {"zeroeval_math_l5"} and len(joined) == 2 + 180
    with pytest.raises(FileNotFoundError, match="no such sample-set JSONL file"):
        load_sample_sets(f"{tmp_path / 'missing.jsonl'}+zeroeval_build")


def test_the_package_docstring_names_every_step_in_order():
    import training
    from training.cli import STEPS

    chain = training.__doc__.split(":", 1)[1].split(",", 1)[0]
    assert [step.strip() for step in chain.split("→")] == list(STEPS)

"""Command line: `grpo-lab train`, `grpo-lab fields`, `grpo-lab presets`, `grpo-lab plan`,
`grpo-lab figures`, `grpo-lab diagnose`, `grpo-lab bench`, `grpo-lab store`."""

import argparse
import json
import sys
import typing
from pathlib import Path

from grpo_lab.config import Config, field_doc, field_sections, parse_override
from grpo_lab.profiles import PROFILES


def _train(args: argparse.Namespace) -> int:
    from grpo_lab.analysis.diagnostics import summary_findings
    from grpo_lab.experiments.store import run_dir
    from grpo_lab.presets import preset
    from grpo_lab.runlog import read_summary
    from grpo_lab.training.trainer import train

    overrides = dict(parse_override(s) for s in args.set)
    named = (("steps", args.steps), ("seed", args.seed), ("model", args.model), ("task", args.task))
    given = {k: v for k, v in named if v is not None}
    config = preset(args.preset, **{**given, **overrides})  # --set wins; unset, the preset's or config's
    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the directory of the interrupted run")
    out = Path(args.out) if args.out else run_dir(config, "runs")
    train(config, out=out, resume=args.resume, findings=summary_findings)
    print(json.dumps(read_summary(out), indent=2))
    print(f"run written to {out}")
    return 0


def _fields(args: argparse.Namespace) -> int:
    hints, defaults = typing.get_type_hints(Config), Config()
    pattern = args.filter.lower() if args.filter else ""
    shown = 0
    for section, names in field_sections().items():
        names = [n for n in names if pattern in n.lower()]
        if not names:
            continue
        print(f"[{section}]")
        for name in names:
            kind = (
                str(hints[name]).replace("typing.", "")
                if typing.get_args(hints[name])
                else hints[name].__name__
            )
            default = getattr(defaults, name)
            print(f"  {name:28s} {kind:18s} {default!r:22} {field_doc(name)}")
        shown += len(names)
    if not shown:
        raise ValueError(f"no config field matches {args.filter!r} (run `grpo-lab fields` for all)")
    print("set one with `grpo-lab train --set KEY=VALUE` (tuples: comma-separated, e.g. rewards=a,b)")
    return 0


def _presets(args: argparse.Namespace) -> int:
    from grpo_lab.presets import PRESETS, matched_comparator

    if args.diff:
        print("\n".join(_diff_sections(args.diff, matched_comparator(args.diff))))
        return 0
    for name, entry in PRESETS.items():
        print(f"{name:14s} {entry.doc}")
    return 0


def _diff_sections(name: str, comparator: str) -> list[str]:
    """What preset `name` changes relative to grpo and, when its matched comparator is another preset,
    relative to that one (its own mechanism alone), each under a heading; one line when it is grpo."""
    against_grpo = _diff_lines(name, "grpo")
    if not against_grpo:
        return [f"{name}: identical to grpo"]
    if comparator == "grpo":
        return [f"{name} relative to grpo, its matched comparator:", *against_grpo]
    return [
        f"{name} relative to grpo:",
        *against_grpo,
        f"{name} relative to its matched comparator {comparator} (its own mechanism):",
        *_diff_lines(name, comparator),
    ]


def _diff_lines(name: str, against: str) -> list[str]:
    """A line per field in which preset `name` differs from preset `against`: both values and its doc."""
    from grpo_lab.presets import preset_diff

    diff = preset_diff(name, against)
    return [
        f"{key:24s} {base!r:>22} -> {value!r:<22} # {field_doc(key)}" for key, (base, value) in diff.items()
    ]


def _plan(args: argparse.Namespace) -> int:
    from grpo_lab.plan import CALIBRATION, calibrate, describe, plan

    if args.model and not args.calibrate:
        raise SystemExit("--model names the model --calibrate times; give --calibrate with it")
    if args.calibrate:
        record = calibrate(model=args.model)
        print(f"calibration written to {CALIBRATION}: {describe(record)}")
        print(json.dumps(record["seconds"], indent=2))
        return 0
    planned = plan(args.profile, args.only, from_empty=args.from_empty)
    if args.unused:
        try:
            unused = planned.unused()
        except ValueError as error:
            raise SystemExit(f"--unused: {error} (drop --only and --from-empty)") from error
        print("\n".join(str(path) for path in unused))
        print(
            f"{len(unused)} run directories in {planned.store} no notebook of {args.profile!r} needs",
            file=sys.stderr,
        )
        return 0
    print(json.dumps(planned.counts(), indent=2) if args.json else planned.format())
    return 0


def _figures(args: argparse.Namespace) -> int:
    from grpo_lab.figures import check, regenerate

    if args.check:
        if args.only or args.no_train or args.profile != "full":
            raise SystemExit("--check checks the committed full-profile figures: it takes no other option")
        problems = check()
        print("\n".join(problems) if problems else "the committed figures follow from the committed runs")
        return 1 if problems else 0
    failures = regenerate(profile=args.profile, only=args.only, train=not args.no_train)
    return 1 if failures else 0


def _store_rename_preset(args: argparse.Namespace) -> int:
    from grpo_lab.experiments.migrations import rename_preset

    root = Path(args.root) if args.root else PROFILES["full"].runs_dir()
    task_dirs = args.task_dir or None
    done = rename_preset(root, args.old, args.new, dry_run=args.dry_run, task_dirs=task_dirs)
    for rename in done:
        print(rename.describe())
    moved = sum(r.action != "keep" for r in done)
    kept = len(done) - moved
    verb = "would move" if args.dry_run else "moved"
    print(f"{verb} {moved} runs of {args.old!r} to {args.new!r} in {root}; {kept} kept", file=sys.stderr)
    return 0


def _store_pack(args: argparse.Namespace) -> int:
    from grpo_lab.experiments.migrations import pack_store

    root = Path(args.root) if args.root else PROFILES["full"].runs_dir()
    done = pack_store(root, dry_run=args.dry_run)
    for path, _, what in done:
        print(f"{path.name}: {what}")
    left = [path for path, packed, _ in done if not packed]
    print(
        f"{len(done) - len(left)} runs {'to pack' if args.dry_run else 'packed'} in {root}; {len(left)} "
        "left loose (not as sealed)",
        file=sys.stderr,
    )
    return 1 if left else 0


def _diagnose(args: argparse.Namespace) -> int:
    from grpo_lab.analysis.diagnostics import diagnose_run, format_findings

    findings = diagnose_run(args.run_dir)
    print(format_findings(findings))
    return 1 if any(f.level == "error" for f in findings) else 0


def _bench(args: argparse.Namespace) -> int:
    from grpo_lab.bench import arm_set, arms, bench, format_arms, format_report, format_study_step, study_step

    if args.arms or args.arms_of:
        names = args.arms or arm_set(args.arms_of)
        overrides = dict(parse_override(s) for s in args.set)
        threads = args.threads or 1
        report = arms(names, args.profile, args.rounds, args.steps, args.warmup, threads, **overrides)
        print(format_arms(report))
        _write_json(report, args.json)
        return 0
    if args.set:
        raise ValueError("--set applies to the arms of --arms or --arms-of only")
    if args.study:
        threads = args.threads or 1
        report = study_step(rounds=args.rounds, steps=args.steps, warmup=args.warmup, threads=threads)
        print(format_study_step(report))
        _write_json(report, args.json)
        return 0
    report = bench(
        model=args.model,
        steps=args.steps,
        rounds=args.rounds,
        warmup=args.warmup,
        betas=tuple(args.betas),
        force_length=args.force_length,
        completion_length=args.completion_length,
        prompts=args.prompts,
        group_size=args.group_size,
        rows_per_forward=args.rows_per_forward,
        device=args.device,
        trl=not args.no_trl,
        bare=not args.no_bare,
        pool_runs=args.pool_runs,
        pool_steps=args.pool_steps,
        pool_model=args.pool_model,
        threads=args.threads,
    )
    print(format_report(report))
    _write_json(report, args.json)
    return 0


def _write_json(report: dict, path: str | None) -> None:
    """Also write a bench report to `path` as JSON (nothing without a path)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=2))
        print(f"figures written to {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grpo-lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser(
        "train",
        help="train one run and write its directory",
        description="Train one run and write its directory.",
        epilog="`grpo-lab fields` lists every config field --set can change, with its type, default and doc.",
    )
    t.add_argument("--preset", default="grpo", help="named method (see `grpo-lab presets`)")
    t.add_argument("--steps", type=int, help=f"training steps (default: the config's, {Config().steps})")
    t.add_argument("--seed", type=int, help=f"seed of the run (default: the config's, {Config().seed})")
    t.add_argument(
        "--model", help="'embedded', 'smollm2-135m' or a model directory (default: the config's, embedded)"
    )
    t.add_argument("--task", help=f"a task name or file:PATH.jsonl (default: the config's, {Config().task})")
    t.add_argument("--out", default=None, help="run directory (default runs/<preset>-seed<S>-<hash>)")
    t.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field (repeatable; list them with `grpo-lab fields`)",
    )
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    t.set_defaults(fn=_train)
    fl = sub.add_parser("fields", help="list every config field with its type, default and doc, by section")
    fl.add_argument("filter", nargs="?", default=None, help="show only fields whose name contains this")
    fl.set_defaults(fn=_fields)
    p = sub.add_parser(
        "presets",
        help="list presets, or show what one changes relative to grpo and to its matched comparator",
    )
    p.add_argument("--diff", metavar="NAME", default=None)
    p.set_defaults(fn=_presets)
    pl = sub.add_parser(
        "plan",
        help="the runs each notebook needs under a profile, how many are stored, the core-hours of the rest",
        description="Per notebook and in total: the runs the profile needs (a run shared by notebooks "
        "counts once, for the first), how many the run store holds finished and current, and the "
        "core-hours (and hours on this machine's cores) of the rest, from the committed calibration.",
    )
    pl.add_argument("--profile", choices=list(PROFILES), default="full")
    pl.add_argument("--only", nargs="*", default=None, help="notebook names or numbers (default: all)")
    pl.add_argument("--from-empty", action="store_true", help="ignore the run store: every run is to train")
    pl.add_argument(
        "--json",
        action="store_true",
        help="print {notebook: {runs, stored, to_train, core_hours, spent_core_hours, ...}}",
    )
    pl.add_argument(
        "--unused",
        action="store_true",
        help="list the run directories in the store that no notebook of the profile needs (nothing deleted)",
    )
    pl.add_argument(
        "--calibrate",
        action="store_true",
        help="time a few steps and evaluations of the study base on one thread and write the calibration",
    )
    pl.add_argument(
        "--model",
        default=None,
        help="with --calibrate: time the pretrained bed of this model (smollm2-135m), kept beside the base",
    )
    pl.set_defaults(fn=_plan)
    f = sub.add_parser(
        "figures", help="print the plan, then regenerate the figures by running the notebooks with papermill"
    )
    f.add_argument("--profile", choices=list(PROFILES), default="full")
    f.add_argument("--only", nargs="*", default=None, help="notebook names to run (default: all)")
    f.add_argument(
        "--no-train",
        action="store_true",
        help="regenerate from the stored runs only: fail, before running anything, if a run is missing",
    )
    f.add_argument(
        "--check",
        action="store_true",
        help="re-execute the committed full-profile notebooks against results/ (pytest --nbval, nothing "
        "trained) and compare every figure's data with the committed one (exit 1 on any difference)",
    )
    f.set_defaults(fn=_figures)
    st = sub.add_parser("store", help="maintain a run store (the full profile's, results/, by default)")
    store_sub = st.add_subparsers(dest="store_command", required=True)
    rp = store_sub.add_parser(
        "rename-preset",
        help="move the stored runs of a renamed preset to the new name and key (config and seal updated)",
        description="Every run directory whose config.json names preset OLD: config.json names NEW, the "
        "manifest records its new checksum (behaviour version and every other file kept), and the "
        "directory moves to NEW's name and key. Atomic per run; refused, before anything moves, where a "
        "target exists or a run is not where its config puts it.",
    )
    rp.add_argument("old", help="the preset name the stored runs have")
    rp.add_argument("new", help="the preset they are runs of today (a name of `grpo-lab presets`)")
    rp.add_argument("--root", default=None, help="the run store (default: the full profile's, results/)")
    rp.add_argument("--dry-run", action="store_true", help="list what would be done, moving nothing")
    rp.add_argument(
        "--task-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="where to look for a file:PATH task's file that is gone from PATH (repeatable; default: the "
        "project root)",
    )
    rp.set_defaults(fn=_store_rename_preset)
    pk = store_sub.add_parser(
        "pack",
        help="pack the loose records of runs sealed before records.zip (seal them again, same behaviour)",
        description="Every sealed run that keeps config.json, summary.json, samples.jsonl or another JSON "
        "record loose is sealed again under the behaviour version its manifest records, which packs them "
        "into records.zip; a run whose files do not match its manifest is left as it is (exit 1).",
    )
    pk.add_argument("--root", default=None, help="the run store (default: the full profile's, results/)")
    pk.add_argument("--dry-run", action="store_true", help="list what would be done, changing nothing")
    pk.set_defaults(fn=_store_pack)
    d = sub.add_parser(
        "diagnose", help="print the automatic findings of a run (exit 1 on an error-level one)"
    )
    d.add_argument("run_dir")
    d.set_defaults(fn=_diagnose)
    b = sub.add_parser("bench", help="time a GRPO step against TRL and the bare bound (and the sweep pool)")
    b.add_argument(
        "--model",
        default="embedded",
        help="'embedded', '4m' (a ~4.2M-param Llama), 'smollm2-135m' or a model directory "
        "(benchmarks/qwen_vocab_model.py builds the Qwen-vocabulary one)",
    )
    b.add_argument("--steps", type=int, default=5, help="measured steps per system (or arm), round and beta")
    b.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    b.add_argument("--warmup", type=int, default=1, help="steps left out at the start of each measurement")
    b.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.04], help="KL coefficients")
    b.add_argument("--completion-length", type=int, default=24)
    b.add_argument("--prompts", type=int, default=8, help="distinct prompts per step")
    b.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    b.add_argument(
        "--rows-per-forward",
        type=int,
        default=0,
        help="completions per forward and backward on every side (0: the whole batch)",
    )
    b.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    length = b.add_mutually_exclusive_group()
    length.add_argument(
        "--force-length",
        dest="force_length",
        action="store_true",
        default=None,
        help="suppress EOS: every completion has exactly --completion-length tokens (default but for "
        "the embedded model)",
    )
    length.add_argument(
        "--natural-length",
        dest="force_length",
        action="store_false",
        help="completions end at EOS (default for the embedded model)",
    )
    b.add_argument("--no-trl", action="store_true", help="leave TRL out even when it is installed")
    b.add_argument("--no-bare", action="store_true", help="leave the bare bound out")
    b.add_argument(
        "--pool-runs",
        type=int,
        default=10,
        help="runs of the sweep timed on 1 and 2 workers (0: none); even, so no worker idles at the end",
    )
    b.add_argument(
        "--pool-steps", type=int, default=100, help="steps of each run of that sweep (a study's run length)"
    )
    b.add_argument("--pool-model", default="embedded", help="the model of that sweep")
    b.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    b.add_argument("--json", default=None, help="also write the figures to this JSON file")
    instead = b.add_mutually_exclusive_group()
    instead.add_argument(
        "--study",
        action="store_true",
        help="instead: time the study base's step against the half batch's (interleaved, one thread)",
    )
    instead.add_argument(
        "--arms",
        nargs="+",
        metavar="ARM",
        help="instead: time these arms on the study base side by side, each in its own process on one "
        "thread (unless --threads), beside their passes, tokens and FLOPs by count: presets (grpo cispo), "
        "tricks switched on over grpo (dynamic_sampling) or 'all' tricks on; the first is the reference "
        "(all tricks on but one, which argparse would read as an option, come with --arms-of leave-one-out)",
    )
    instead.add_argument(
        "--arms-of",
        metavar="SET",
        help="instead: time a named set of arms as --arms does (bench.ARM_SETS: 'schemes', grpo and each "
        "of the schemes; 'tricks', grpo and each trick on over it; 'leave-one-out', all and each left out)",
    )
    b.add_argument(
        "--profile", default="full", choices=list(PROFILES), help="the study base's profile of the arms"
    )
    b.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config field over every arm (repeatable; --arms and --arms-of only)",
    )
    b.set_defaults(fn=_bench)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, FileExistsError, PermissionError) as err:
        print(f"grpo-lab: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

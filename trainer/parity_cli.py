"""`python -m trainer parity RUN`: the parity gate's command, and `--launch`, which serves the run's target
and its export here the way the bench will (trainer/parity.py holds the checks).

With `--launch` the export is first loaded by vLLM's own loader (any drafter tensor it leaves unloaded
fails the gate), then served as its own kind: DFlash with `method: dflash`, DSpark with `method: dspark`,
each with its own number of draft tokens; a kind vLLM CPU refuses (DFlash2, DSpark) is served by our
engine instead, and the report says so — on such a row the gate proves our engine against itself, not the
export against vLLM. With `--prove-export`, an inconclusive drafter check is followed by the gate of a
throwaway drafter overfit on the gate's prompts (trainer/parity_probe.py): the export path is proven even
when the run's drafter accepts too little to prove it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml

from clikit import settings_command
from lm import Target
from serving.launch import VllmServer
from serving.venv import availability
from trainer.dflash.kinds import KINDS, drafted_tokens, kind_of
from trainer.evaluate import Prompt
from trainer.parity import (
    ParityError,
    ParitySettings,
    drafter_parity,
    parity,
    run_prompts,
    run_target,
    stage,
)
from trainer.parity_features import feature_checks
from trainer.parity_probe import throwaway
from trainer.replay.bench import loads_whole
from trainer.replay.calls import ReplayError
from trainer.replay.servers import VLLM_CPU_CANNOT, BenchSettings, Server, drafter_server, served


def launched(s: ParitySettings) -> dict[str, Any]:
    """Both checks against servers started here (eager vLLM: they start in about a minute)."""
    cfg = yaml.safe_load((s.run / "config.yaml").read_text()) if (s.run / "config.yaml").exists() else {}
    target = str(cfg.get("target", "smollm2"))
    model, prompts = run_target(s.run), run_prompts(s)  # loaded once, for the gate and its throwaway
    export = s.run / "export"
    kind = kind_of(export)
    tokens = s.draft_tokens or drafted_tokens(export)
    server = drafter_server(export, "vllm")  # a kind vLLM CPU cannot serve: our engine serves it, marked
    ours = server.engine is not None
    loads_whole(target, {"export": server}, "vllm")  # a tensor vLLM leaves unloaded fails the gate
    servers = {"plain": Server("plain"), "export": server}
    # float32 unless asked: the gate proves the export, and bfloat16 serving moves an overfit drafter's
    # acceptance by more than the gap it allows (docs/serving.md), at no saving in time on a CPU
    dtype = VllmServer.model_validate({"dtype": s.dtype or "float32"}).resolved_dtype()
    bench = BenchSettings(
        run=s.run,
        compile=False,
        # only as long as the gate's longest prompt needs: three servers' KV caches of 1 GiB each fit
        # beside the gate on 24 GiB, and 1 GiB holds 14,336 float32 SmolLM2 positions, not 32,768
        max_model_len=min(
            s.max_model_len, -(-(max(len(p.ids) for p in prompts) + s.max_tokens) // 1024) * 1024
        ),
        kv_cache_gib=1,
        draft_tokens=tokens,
        dtype=dtype,
    )
    logs = s.out or s.run / "parity"
    logs.mkdir(parents=True, exist_ok=True)
    timed: dict[str, Any] = {}
    with stage(timed, "features", "(c)/(d) the export's features checked"):
        features = feature_checks(s.run, model, prompts, s.max_tokens, s.mal_gap)
    # a drafter (c)/(d) already find too weak or blind for (b): its throwaway is trained now, so that its
    # server starts beside the others instead of after them
    probe = None
    if s.prove_export and features.get("ok") and _likely_inconclusive(features, s):
        probe = train_probe(s, target, model, prompts, server, logs)
        servers["throwaway"] = server._replace(draft=probe[0] / "export")
    started = time.perf_counter()
    with served("vllm", target, servers, bench, logs, who="parity") as urls:
        timed["seconds"]["servers_start"] = round(time.perf_counter() - started, 1)
        update = {
            "endpoint": urls["plain"],
            "draft_endpoint": urls["export"],
            "draft_tokens": tokens,
            "dtype": dtype,
        }
        report = parity(s.model_copy(update=update), model, prompts, features)
        checked = report["target"]["ok"] and report["features"]["ok"]
        wanted = report["inconclusive"] and s.prove_export and checked
        if wanted and probe is not None:
            report["throwaway"] = judge_probe(s, model, prompts, bench, probe, urls["throwaway"])
    if wanted and probe is None:  # (c)/(d) did not foresee it: trained and served only now
        probe = train_probe(s, target, model, prompts, server, logs)
        alone = {"throwaway": server._replace(draft=probe[0] / "export")}
        with served("vllm", target, alone, bench, logs, who="parity") as urls:
            report["throwaway"] = judge_probe(s, model, prompts, bench, probe, urls["throwaway"])
    report.setdefault("seconds", {}).update(timed["seconds"])
    report["served"] = {
        "kind": kind,
        "method": KINDS[kind].method,
        "draft_tokens": tokens,
        "engine": "ours" if ours else "vLLM",
        "dtype": dtype,
        "note": VLLM_CPU_CANNOT.get(kind),
    }
    if probe := report.get("throwaway"):
        # a throwaway that accepts and agrees proves the path; one that disagrees is a fault of the export
        # path whatever is allowed; one that still accepts too little proves nothing either way
        report["ok"] = probe["ok"] or (probe["status"] == "inconclusive" and s.allow_inconclusive)
    (s.out or s.run).joinpath("parity.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def _likely_inconclusive(features: dict[str, Any], s: ParitySettings) -> bool:
    """(b) will be inconclusive: the export's teacher-forced acceptance (what our engine's greedy
    speculative decoding measures, to rounding) is under `min_mal`, or it does not read its context."""
    if not (sensitivity := features.get("sensitivity")):
        return False  # (c)/(d) were skipped: (b) alone decides, and the throwaway waits for it
    accepts = sensitivity["teacher_forced_acceptance"]["export"]
    return bool(accepts < s.min_mal or not sensitivity["sensitive"])


def train_probe(
    s: ParitySettings, target: str, model: Target, prompts: list[Prompt], server: Server, logs: Path
) -> tuple[Path, dict[str, Any]]:
    """The throwaway (trainer/parity_probe.py): overfit and exported; and its (c)/(d)."""
    typer.echo(
        "parity: the drafter check will be inconclusive; proving the export path with a throwaway", err=True
    )
    timed: dict[str, Any] = {}
    with stage(timed, "overfit", "(b') the throwaway overfit and exported"):
        probe = throwaway(
            s.run, model, prompts, s.max_tokens, logs / "throwaway", steps=s.probe_steps, lr=s.probe_lr
        )
    # vLLM's loader is not asked again: the throwaway's export has the run's export's tensors, names
    # and shapes (a copy of its drafter, exported by the same code), and that one was checked
    with stage(timed, "features", "(b') the throwaway's features checked"):
        features = feature_checks(probe, model, prompts, s.max_tokens, s.mal_gap)
    return probe, {"features": features, **timed}


def judge_probe(
    s: ParitySettings,
    model: Target,
    prompts: list[Prompt],
    bench: BenchSettings,
    probe: tuple[Path, dict[str, Any]],
    url: str,
) -> dict[str, Any]:
    """The throwaway's drafter check against the server that serves its export."""
    folder, done = probe
    features = done["features"]
    sensitive = features["sensitivity"]["sensitive"]  # overfit on these prompts' features: it should be
    checked = s.model_copy(update={"draft_tokens": bench.draft_tokens})
    with stage(done, "compared", "(b') the throwaway compared"):
        check = drafter_parity(folder, model, url, prompts, checked, sensitive)
    if not features["ok"]:  # the path wrote an export that is not the drafter it trained
        check.update(ok=False, status="failed")
    return {**check, **done}


def _line(report: dict[str, Any]) -> str:
    t = report["target"]
    text = (
        f"(a) target: mean |Δ log p| {t['mean_abs_logprob_diff']:.4f} (≤ {t['thresholds']['mean_abs_logprob_diff']}), "
        f"greedy agreement {t['greedy_agreement']:.3f} (≥ {t['thresholds']['greedy_agreement']}) over "
        f"{t['tokens']} tokens: {'ok' if t['ok'] else 'FAILED'}"
    )
    text += _features_line(report.get("features") or {})
    if d := report.get("drafter"):
        lengths = ", ".join(str(n) for n in d["prompt_tokens"])
        text += (
            f"\n(b) drafter: our acceptance length {d['our_acceptance_length']:.3f}, engine MAL "
            f"{d['engine_mal']}, gap {d['relative_gap']} (≤ {d['threshold']}) on prompts of {lengths} "
            f"tokens: {d['status'].upper()}"
        )
        if d["status"] == "inconclusive":
            why = (
                "the drafter does not read its context (d)"
                if d.get("why_inconclusive") == "does not read its context"
                else f"both accept too little (MAL under {d['min_mal']})"
            )
            text += (
                f" — {why} to tell a right export from a broken one; train longer, or pass --prove-export "
                "or --allow-inconclusive"
            )
    if probe := report.get("throwaway"):
        verdict = {"passed": "proven", "failed": "NOT proven: the export path is broken"}.get(
            probe["status"], "not proven either way"
        )
        text += (
            f"\n(b') throwaway drafter overfit on the gate's prompts: our acceptance length "
            f"{probe['our_acceptance_length']:.3f}, engine MAL {probe['engine_mal']}, gap {probe['relative_gap']}: "
            f"{probe['status'].upper()} — the export path {verdict}"
        )
    if served := report.get("served"):
        text += f"\nserved: {served['kind']} as method {served['method']}, {served['draft_tokens']} draft tokens, "
        text += f"by {served['engine']} in {served['dtype']}" + (
            f" ({served['note']})" if served["note"] else ""
        )
    return text


def _features_line(f: dict[str, Any]) -> str:
    if not f or "skipped" in f:
        return f"\n(c) export fidelity: skipped ({f.get('skipped', 'not run')})" if f else ""
    fi, se = f["fidelity"], f["sensitivity"]
    declared = "; ".join(f"{k} {a} trained, {b} exported" for k, (a, b) in fi["declared_differently"].items())
    tf, ch = se["teacher_forced_acceptance"], se["relative_change"]
    moved = ", ".join(f"{k} {se['moved_taps'][k]} {tf[k]} ({ch[k]:+.1%})" for k in ("early", "late"))
    verdict = "it reads its context" if se["sensitive"] else "INSENSITIVE: (b) cannot see a fault there"
    if se["better_elsewhere"]:
        verdict = f"FAILED: it accepts more on the {' and '.join(se['better_elsewhere'])} taps than its own"
    return (
        f"\n(c) the export as served vs the drafter as trained: relative distance {fi['relative_distance']} "
        f"(≤ {fi['threshold']}) over {fi['blocks']} blocks"
        + (f", {declared}" if declared else "")
        + f": {'ok' if fi['ok'] else 'FAILED'}"
        f"\n(d) teacher-forced acceptance length {tf['export']} on its taps {se['taps']}, {tf['scrambled']} "
        f"({ch['scrambled']:+.1%}) with every position given another's features ((b) sees over "
        f"{se['threshold']:.0%}); taps one layer {moved}: {verdict}"
    )


@settings_command(ParitySettings, exclude={"run"})
def parity_command(
    settings: ParitySettings,
    run: Path = typer.Argument(Path("runs/latest"), help="A run directory (runs/<name> or runs/latest)."),
) -> None:
    """Compare the trainer's target and drafter with what a serving engine computes (the parity gate)."""
    settings = settings.model_copy(update={"run": run})
    if settings.launch and not (have := availability()).ok:
        typer.echo(f"parity: not run: {have.line()}", err=True)
        return
    if not settings.launch and not settings.endpoint:
        typer.echo("parity: give --endpoint URL (and --draft-endpoint URL), or --launch", err=True)
        raise typer.Exit(2)
    try:
        report = launched(settings) if settings.launch else parity(settings)
    except (ParityError, ReplayError, httpx.HTTPError) as e:
        typer.echo(f"parity: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(_line(report))
    export = settings.run / "export"
    if export.is_dir() and "drafter" in report:
        mark = {"ok": report["ok"], "override": settings.override and not report["ok"], **report}
        (export / "parity.json").write_text(json.dumps(mark, indent=2) + "\n")
    if report["ok"]:
        proven = (report.get("throwaway") or {}).get("ok")
        how = " (this drafter's check inconclusive; the export path proven by a throwaway)" if proven else ""
        how = how or (" (drafter check inconclusive, allowed)" if report["inconclusive"] else "")
        typer.echo("parity: passed" + how)
        return
    why = "INCONCLUSIVE" if report["inconclusive"] and report["target"]["ok"] else "FAILED"
    verdict = "kept, marked as failing (override)" if settings.override else "refused"
    typer.echo(f"parity: {why}: the export is {verdict}; see {settings.run / 'parity.json'}", err=True)
    if not settings.override:
        raise typer.Exit(1)

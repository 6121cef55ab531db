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
from pathlib import Path
from typing import Any

import httpx
import typer
import yaml

from clikit import settings_command
from serving.drafter_load import DrafterLoadError, check_loads
from serving.launch import VllmServer
from serving.serve import model_path
from serving.venv import availability
from standin import load_target
from trainer.data.build import read
from trainer.dflash.kinds import KINDS, drafted_tokens, kind_of
from trainer.parity import ParityError, ParitySettings, drafter_parity, gate_prompts, parity
from trainer.parity_probe import throwaway
from trainer.replay.calls import ReplayError
from trainer.replay.servers import VLLM_CPU_CANNOT, BenchSettings, Server, served


def launched(s: ParitySettings) -> dict[str, Any]:
    """Both checks against servers started here (eager vLLM: they start in about a minute)."""
    cfg = yaml.safe_load((s.run / "config.yaml").read_text()) if (s.run / "config.yaml").exists() else {}
    target = str(cfg.get("target", "smollm2"))
    export = s.run / "export"
    kind = kind_of(export)
    tokens = s.draft_tokens or drafted_tokens(export)
    ours = kind in VLLM_CPU_CANNOT  # this vLLM cannot serve the kind: our engine serves it, marked
    if not ours:
        try:
            check_loads(model_path(target), export, KINDS[kind].method, tokens)
        except DrafterLoadError as e:
            raise ParityError(str(e)) from None
    server = Server(KINDS[kind].method, export, "standin" if ours else None)  # type: ignore[arg-type]
    servers = {"plain": Server("plain"), "export": server}
    bench = BenchSettings(
        run=s.run, compile=False, max_model_len=s.max_model_len, kv_cache_gib=1, draft_tokens=tokens
    )
    logs = s.out or s.run / "parity"
    logs.mkdir(parents=True, exist_ok=True)
    dtype = VllmServer.model_validate({}).resolved_dtype()
    with served("vllm", target, servers, bench, logs, who="parity") as urls:
        update = {
            "endpoint": urls["plain"],
            "draft_endpoint": urls["export"],
            "draft_tokens": tokens,
            "dtype": s.dtype or dtype,
        }
        report = parity(s.model_copy(update=update))
    report["served"] = {
        "kind": kind,
        "method": KINDS[kind].method,
        "draft_tokens": tokens,
        "engine": "ours" if ours else "vLLM",
        "dtype": s.dtype or dtype,
        "note": VLLM_CPU_CANNOT.get(kind),
    }
    if report["inconclusive"] and s.prove_export and report["target"]["ok"]:
        probe = report["throwaway"] = prove(s, target, kind, server, tokens, bench, logs)
        # a throwaway that accepts and agrees proves the path; one that disagrees is a fault of the export
        # path whatever is allowed; one that still accepts too little proves nothing either way
        report["ok"] = probe["ok"] or (probe["status"] == "inconclusive" and s.allow_inconclusive)
    (s.out or s.run).joinpath("parity.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def prove(
    s: ParitySettings, target: str, kind: str, server: Server, tokens: int, bench: BenchSettings, logs: Path
) -> dict[str, Any]:
    """The throwaway's drafter check: overfit, exported, loaded by vLLM, served as the run's kind."""
    typer.echo(
        f"parity: the drafter check is inconclusive; proving the export path with a throwaway {kind}",
        err=True,
    )
    model = load_target(target)
    held = s.run / "data" / "eval.parquet"
    prompts = gate_prompts(read(held) if held.exists() else [], s)
    probe = throwaway(s.run, model, prompts, s.max_tokens, logs / "throwaway", steps=s.probe_steps)
    if server.engine is None:
        try:
            check_loads(model_path(target), probe / "export", server.method, tokens)
        except DrafterLoadError as e:
            raise ParityError(f"the throwaway's export: {e}") from None
    served_probe = {"throwaway": server._replace(draft=probe / "export")}
    with served("vllm", target, served_probe, bench, logs, who="parity") as urls:
        checked = s.model_copy(update={"draft_tokens": tokens})
        return drafter_parity(probe, model, urls["throwaway"], prompts, checked)


def _line(report: dict[str, Any]) -> str:
    t = report["target"]
    text = (
        f"(a) target: mean |Δ log p| {t['mean_abs_logprob_diff']:.4f} (≤ {t['thresholds']['mean_abs_logprob_diff']}), "
        f"greedy agreement {t['greedy_agreement']:.3f} (≥ {t['thresholds']['greedy_agreement']}) over "
        f"{t['tokens']} tokens: {'ok' if t['ok'] else 'FAILED'}"
    )
    if d := report.get("drafter"):
        lengths = ", ".join(str(n) for n in d["prompt_tokens"])
        text += (
            f"\n(b) drafter: our acceptance length {d['our_acceptance_length']:.3f}, engine MAL "
            f"{d['engine_mal']}, gap {d['relative_gap']} (≤ {d['threshold']}) on prompts of {lengths} "
            f"tokens: {d['status'].upper()}"
        )
        if d["status"] == "inconclusive":
            text += (
                f" — both accept too little (MAL under {d['min_mal']}) to tell a right export from a "
                "broken one; train longer, or pass --prove-export or --allow-inconclusive"
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

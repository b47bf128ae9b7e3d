"""The `rubricrl` command (typer + rich); `rubricrl.cli:app` is the entry point.

One module per command group, each defining plain functions; this file builds the typer apps and
registers every command, in the order `rubricrl --help` lists them:

- `score`: score; `rubrics`: rubrics lint, generate, refine; `judge`: judge fit, agree, calibrate, audit;
- `eval`: eval, compare, report; `train`: train; `simulate`: simulate, simulate summarize;
  `tactics`: tactics classify, stickiness, fit; `serve`: serve, llama-server;
- shared by all: `options` (options several commands take, declared once) and `common` (consoles,
  error exits, progress bars, the `--rubric` loader, the `--judge` builder).

Heavy libraries (torch, transformers, trl, sklearn, httpx...) load inside the commands that use them,
so `rubricrl --help` stays fast and every command's help works on the core install (`pip install
rubricrl`, no extras). A command that needs an extra that is not installed stops with one line naming
the `pip install` to run (`main`, the console script; core/extras.py). Nothing outside `rubricrl.cli`
imports from it."""

import typer

from rubricrl.cli import eval as eval_commands  # not `eval`: that is a builtin
from rubricrl.cli import judge, rubrics, score, serve, simulate, tactics, train

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Rubric rewards for RL of language models: lint rubrics, judge, score.")
rubrics_app = typer.Typer(no_args_is_help=True, help="Check rubric files.")
app.add_typer(rubrics_app, name="rubrics")
judge_app = typer.Typer(no_args_is_help=True, help="Fit and inspect judges.")
app.add_typer(judge_app, name="judge")
tactics_app = typer.Typer(no_args_is_help=True, help="Tactic labels, stickiness and classifiers.")
app.add_typer(tactics_app, name="tactics")

rubrics_app.command("lint")(rubrics.lint)
rubrics_app.command("generate")(rubrics.rubrics_generate)
rubrics_app.command("refine")(rubrics.rubrics_refine)
app.command("score")(score.score)
judge_app.command("fit")(judge.judge_fit)
judge_app.command("fit-gate")(judge.judge_fit_gate)
judge_app.command("agree")(judge.judge_agree)
judge_app.command("calibrate")(judge.judge_calibrate)
judge_app.command("audit")(judge.judge_audit)
tactics_app.command("classify")(tactics.tactics_classify)
tactics_app.command("stickiness")(tactics.tactics_stickiness)
tactics_app.command("fit")(tactics.tactics_fit)
app.command("train")(train.train)
simulate_app = typer.Typer(invoke_without_command=True, help="Simulated users: run conversations, summarize "
                                                              "transcript files.")
simulate_app.callback()(simulate.simulate)
simulate_app.command("summarize")(simulate.summarize)
app.add_typer(simulate_app, name="simulate")
app.command("llama-server")(serve.llama_server)
app.command("eval")(eval_commands.eval_)
app.command("compare")(eval_commands.compare)
app.command("report")(eval_commands.report)
app.command("serve")(serve.serve)


def main() -> None:
    """The `rubricrl` console script: `app`, with a missing optional extra reported as one error line
    naming the `pip install` to run (exit code 2) instead of a traceback."""
    from rubricrl.core.extras import MissingExtraError

    try:
        app()
    except MissingExtraError as exc:
        from rubricrl.cli.common import fail

        try:
            fail(str(exc))
        except typer.Exit as stop:
            raise SystemExit(stop.exit_code) from None


__all__ = ["app", "main"]

from trainer.cli import app

app(prog_name="python -m trainer")

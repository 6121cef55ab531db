from proxy.cli import app

app(prog_name="python -m proxy")

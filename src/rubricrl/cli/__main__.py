from rubricrl.cli import app

app()

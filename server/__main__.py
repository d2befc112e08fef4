"""python -m embedtext.server: the same as `embedtext serve`."""

from embedtext.server.cli import serve_command

if __name__ == "__main__":
    serve_command(prog_name="embedtext serve")

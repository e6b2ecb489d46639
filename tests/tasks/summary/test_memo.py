vcm: installed into .venv

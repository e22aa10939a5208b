from gpufleet.cli.main import run

run()

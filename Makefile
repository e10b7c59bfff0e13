# The README's two commands: `make demo` (the main job, offline) and `make test`.
PY      := .venv/bin/python
VENV_OK := .venv/.installed

.PHONY: demo test sysdeps checkov-venv venv plan policy validate-local heal-local bench lowest lowest-resolve image-torch clean

$(VENV_OK): requirements.txt pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# the `gpu-cluster` command (pyproject's [project.scripts]), from this checkout, nothing else
	$(PY) -m pip install -q --no-deps -e .
	touch $@

venv: $(VENV_OK)

# Debian packages the tests use for real: Slurm and munge (a two-node cluster on this host), ffmpeg,
# chromium (opens the report page).
sysdeps:
	bash scripts/install-system-deps.sh

plan: $(VENV_OK)
	$(PY) -m gpu_cluster plan --all --policy

# The validation pipeline on this machine: two torchrun agents stand for two nodes (CPU, gloo).
# Its verdict (0 pass, 1 warn, 2 fail) is the demo's output, not its success; 3 means it could not run.
validate-local: $(VENV_OK)
	$(PY) -m gpu_cluster.workloads.validate --local --out out/validate-local; rc=$$?; [ $$rc -le 2 ] || exit $$rc

# gpu-cluster heal's rehearsal: local-3 is made slow, validated, confirmed, drained, replaced by a
# fresh instance, revalidated with a cleared node and returned (docs/heal.md). A new run each time.
heal-local: $(VENV_OK)
	rm -rf out/heal-local
	$(PY) -m gpu_cluster.heal --local --nodes 4 --fault local-3:slow --out out/heal-local --apply

demo: plan validate-local heal-local

# Checkov in a virtualenv of its own (its pins conflict with pulumi's): the Kubernetes scan of the rendered jobs.
checkov-venv:
	bash scripts/checkov-venv.sh >/dev/null

# Cheap (about 15 s, metadata only): pip resolves the package with the lowest tested set
# (constraints-lowest.txt) pinned, so a range in pyproject.toml that excludes its own floor fails here.
# The package tests on that set are `make lowest` (a second virtualenv, a few minutes).
lowest-resolve: $(VENV_OK)
	bash scripts/lowest-versions.sh --resolve-only $(PY)

test: $(VENV_OK) sysdeps checkov-venv lowest-resolve
	$(PY) -m ruff check components workloads policies gpu_cluster tests bench examples provider
	$(PY) -m ruff format --check components workloads policies gpu_cluster tests bench examples provider
	$(PY) -m mypy components workloads policies gpu_cluster
	# examples/: a user's own test of their program (components/testing.py), run as they would run it
	$(PY) -m pytest -q --ignore=tests/preflight --ignore=tests/heal/google tests examples
	# A process of their own: Google's client libraries register google/rpc/status.proto, and
	# pulumi's provider server (the package tests) registers the same message from its own copy;
	# protobuf refuses the second in one process. Neither is loaded with the other in the product.
	# heal's GCP calls go through the same libraries.
	$(PY) -m pytest -q tests/preflight tests/heal/google

# The package tests on the lowest tested set of pyproject's ranges (constraints-lowest.txt), in
# .venv-lowest; not in `test`: it downloads pulumi and the providers a second time.
lowest:
	bash scripts/lowest-versions.sh .venv-lowest

# The job's tests on the torch of the NVIDIA Kubernetes jobs' image (the catalog's runtime_images.cuda,
# NGC: a pre-release build of torch's 2.10 line, so its release 2.10.0), in .venv-image-torch:
# tests/workloads, the local validation and a rehearsal of gcp-h100-gke's job (as root). Not in `test`:
# it installs a second torch (the CPU wheel where PyTorch's index answers, else PyPI's several GB).
image-torch: $(VENV_OK)
	bash scripts/image-torch.sh $(PY)

# Every benchmark runs, whatever an earlier one says (collectives_overhead exits 2 when the machine
# is too noisy to decide); the target then fails with the first non-zero status, and its last line
# names every benchmark that exited non-zero. tests/test_bench.py holds BENCHES to bench/'s modules.
BENCHES := plan_scale collectives_overhead ddp_throughput model_parallel_memory fleet_balance fleet_scale bandwidth_model
bench: $(VENV_OK)
	@rc=0; bad=""; for b in $(BENCHES); do \
	  $(PY) -m bench.$$b || { s=$$?; echo "bench.$$b exited $$s"; bad="$$bad, bench.$$b exited $$s"; [ $$rc -ne 0 ] || rc=$$s; }; \
	done; \
	echo "make bench: $(words $(BENCHES)) of $(words $(BENCHES)) benchmarks ran$${bad:-, every one exited 0}"; exit $$rc

clean:
	rm -rf .venv .venv-checkov .venv-lowest .venv-image-torch out .mypy_cache .pytest_cache

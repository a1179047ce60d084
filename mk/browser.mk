# Headless browser for the HTML report test (issue 11): Debian's chromium driven by Playwright
# (the PyPI `playwright` package; its own browser download is not used).
#   make browser        install /usr/bin/chromium via apt-get when missing (as the toolchain rule does)
#   make docs-pictures  regenerate the SVGs of docs/lecture.md from the bundled samples
CHROMIUM ?= /usr/bin/chromium

.PHONY: browser docs-pictures

browser:
	@command -v $(CHROMIUM) >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq >/dev/null 2>&1; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "need chromium for the HTML report test (apt-get install chromium as root)" >&2; exit 1; fi; }

docs-pictures: venv
	$(PY) scripts/docs-pictures.py docs/pictures

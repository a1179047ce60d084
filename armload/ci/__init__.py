"""The tree gate (`armload check`): a module tree checked in dependency order, the per-module
baseline and its diff, JUnit output."""

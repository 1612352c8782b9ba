"""A model family that lives outside `v2/`: registered under the entry-point group `v2.families` (or through
`v2.registry.register`), found by name, and driven by the CLI, the server, the benches and rollouts with no
line of `v2/` naming it. Its model is MOSS-TTS-Local's (a real family's parts, reused, not a stand-in): what
it proves is the plugin path, not another model."""

"""The parts of the framework contract, one module each, composed by
:class:`cw_cli.frameworks.base.BaseTrainingFramework` (docs/plugins.md describes them on one page):

- :mod:`.identity`: who the framework is and which training types it runs.
- :mod:`.native_config`: reading and checking the user's native config.
- :mod:`.mounted_config`: the config and files the pods read.
- :mod:`.launch`: the trainer pod's image, command and templates.
- :mod:`.services`: the servers the trainer needs.
- :mod:`.advice`: what the memory estimate and ``cw status`` need: training setup, words, failure hints.
"""

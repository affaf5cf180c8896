"""The simulated serving fleet.

Its four hot modules (request, histogram, replica, fleet) are compiled with
mypyc when the package is installed (setup.py); ``LLMSCALE_PURE_PYTHON=1``
loads their sources instead (see ``llmscale/__init__.py``).
"""

"""Helpers the test modules share: records, fixture readers, small runners (not tests).

A test module never imports another test module (tests/unit/project/test_model_rules.py checks it):
what two of them need lives here, or as a fixture in a conftest.py.
"""

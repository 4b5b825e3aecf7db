# The types of the job's `.versions`: provision/model/versions.py, which the bundle carries to hosts
# as health/versions.py and provision/remote/health/__init__.py shares with the smoke package in the source tree.
from provision.model.versions import build_matches as build_matches
from provision.model.versions import cudnn_dotted as cudnn_dotted
from provision.model.versions import cudnn_number as cudnn_number
from provision.model.versions import split_local as split_local
from provision.model.versions import version_matches as version_matches

"""Development and test only: ``manage.py simulate`` (servers, order traffic, injected
faults and chaos seeds on an accelerated clock), the probe jobs, the alternatives the
claim is compared with, and the report. Not installed in production settings; it may
import anything of the project and ``support``."""

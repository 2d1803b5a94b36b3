#!/bin/bash
# Oracle for rllm/fix-script-shebang: point the shebang at bash and make the script executable.
sed -i '1s|^#!.*|#!/bin/bash|' /app/bin/report.sh
chmod 0755 /app/bin/report.sh
/app/bin/report.sh /app/bin/report.sh

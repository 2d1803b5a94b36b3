#!/bin/bash
# Oracle for rllm/sum-csv-column: find the column named "amount" in the header and sum it.
awk -F, '
  NR == 1 { for (i = 1; i <= NF; i++) if ($i == "amount") col = i; next }
  { total += $col }
  END { printf "%.2f\n", total }
' /app/sales.csv > /app/total.txt
cat /app/total.txt

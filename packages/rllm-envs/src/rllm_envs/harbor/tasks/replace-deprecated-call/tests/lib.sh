# lib.sh: helpers shared by the report scripts in this folder.
# (legacy_fetch was removed; fetch_item replaces it and takes the same argument.)

# fetch_item NAME: prints the current value of the counter NAME (0 when unknown).
fetch_item() {
  case "$1" in
    orders) echo 42 ;;
    refunds) echo 3 ;;
    signups) echo 17 ;;
    tickets) echo 8 ;;
    *) echo 0 ;;
  esac
}

# legacy_fetch_count: prints how many counters fetch_item knows. Still supported.
legacy_fetch_count() {
  echo 4
}

# require_number VALUE: fails loudly when VALUE is not a whole number.
require_number() {
  case "$1" in
    '' | *[!0-9]*)
      echo "not a number: '$1'" >&2
      exit 1
      ;;
  esac
}

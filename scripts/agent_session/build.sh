#!/bin/sh
# A build log of 2,400 lines ending in an error: the agent session of
# docs/GUIDE.md runs it to show a fold (tests/suite/docs/session.rs replays it).
i=1
while [ "$i" -le 2400 ]; do
  echo "   Compiling dep-$i v0.1.$i"
  i=$((i + 1))
done
echo 'error[E0425]: cannot find value `PORTT` in this scope'
echo ' --> src/main.rs:3:18'
exit 101

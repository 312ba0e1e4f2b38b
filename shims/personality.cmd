@echo off
rem agent-reach session PATH shim: Windows cannot start a program under a
rem link's name, so this file runs the real executable with the hidden flag
rem that selects the personality this shim is named after.
"{exe}" --agent-reach-run-as={name} %*
exit /b %ERRORLEVEL%

/* The baseline for benches/exec.sh: one bare fork + exec of a command with
 * its output on pipes read to EOF, then waitpid. What `agent-reach run`
 * adds on top of this is the engine's cost. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CMD [ARG]...\n", argv[0]);
        return 125;
    }
    int out[2];
    if (pipe(out) < 0) return 125;
    pid_t pid = fork();
    if (pid < 0) return 125;
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    close(out[1]);
    char buf[65536];
    while (read(out[0], buf, sizeof buf) > 0) {
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/**
 * The server's process, started by the extension rather than by vscode-languageclient, so that one that never
 * answers can be ended. Pure: no `vscode` import.
 */
import { ChildProcess, ChildProcessWithoutNullStreams, spawn } from 'node:child_process';

/** Starts `command args` with piped stdio; resolves once it runs, rejects when it cannot start (ENOENT, EACCES). */
export function startProcess(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<ChildProcessWithoutNullStreams> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: 'pipe', windowsHide: true });
    child.once('error', reject);
    child.once('spawn', () => {
      child.off('error', reject);
      resolve(child);
    });
  });
}

export function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/**
 * Ends a process for good: SIGKILL (a wedged server may ignore SIGTERM, and one that did not answer has nothing to
 * save), and its output closed, so that the connection reading it closes at once even when a process it started
 * still holds the pipe.
 */
export function killProcess(child: ChildProcess): void {
  if (isRunning(child)) {
    child.kill('SIGKILL');
  }
  child.stdout?.destroy();
}

/** Resolves true once the process has exited, false if it still runs after `ms`. */
export function exited(child: ChildProcess, ms: number): Promise<boolean> {
  if (!isRunning(child)) {
    return Promise.resolve(true);
  }
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(false);
    }, ms);
    const onExit = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    child.once('exit', onExit);
  });
}

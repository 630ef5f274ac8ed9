/** Which server versions this client works with. Pure: no `vscode` import. */

/**
 * The oldest rca_lsp this client works with: its commands (writeOutputs, suggestMapping), the `rcaLsp/status`
 * notification and the settings rules it validates with. Raise it when the client starts relying on newer ones.
 */
export const MIN_SERVER_VERSION = '0.1.0';

/** The release numbers of a PEP 440 version (`0.1.0`, `1.2`, `0.2.0rc1`, `0.3.dev4+g12ab`) and whether it is a
 * pre-release of them; undefined when it does not start with a number. */
export function parseVersion(version: string): { release: number[]; pre: boolean } | undefined {
  const m = /^\s*v?(\d+(?:\.\d+)*)(.*)$/i.exec(version);
  if (!m) {
    return undefined;
  }
  const rest = m[2].split('+')[0];
  return { release: m[1].split('.').map(Number), pre: /^[-_.]?(a|b|c|rc|alpha|beta|pre|preview|dev)/i.test(rest) };
}

/** Negative when a < b, 0 when equal, positive when a > b (release numbers, then a pre-release before its release). */
export function compareVersions(a: string, b: string): number {
  const pa = parseVersion(a);
  const pb = parseVersion(b);
  if (!pa || !pb) {
    return pa ? 1 : pb ? -1 : 0;
  }
  for (let i = 0; i < Math.max(pa.release.length, pb.release.length); i++) {
    const d = (pa.release[i] ?? 0) - (pb.release[i] ?? 0);
    if (d !== 0) {
      return d;
    }
  }
  return Number(pb.pre) - Number(pa.pre);
}

/** Why the server of this version cannot be used, or undefined when it can. */
export function versionProblem(version: string | undefined, minimum = MIN_SERVER_VERSION): string | undefined {
  if (!version || !parseVersion(version)) {
    return `it reports no version (this extension needs rca_lsp ${minimum} or newer)`;
  }
  if (compareVersions(version, minimum) < 0) {
    return `it is version ${version}, older than the ${minimum} this extension needs`;
  }
  return undefined;
}

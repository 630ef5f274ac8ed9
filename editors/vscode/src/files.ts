/** File-name rules for mapping-key files. Pure: no `vscode` import. */

export const MAPPING_GLOBS = ['**/*mapping_key*.json', '**/output_0_key_mapping.json'] as const;

/** A glob for `workspace.findFiles` covering every mapping-key file name. */
export const MAPPING_FIND_GLOB = '{**/*mapping_key*.json,**/output_0_key_mapping.json}';

export const MAPPING_LANGUAGES = ['json', 'jsonc'] as const;

function baseName(p: string): string {
  const parts = p.split(/[\\/]/);
  return parts[parts.length - 1] ?? '';
}

/** True when a path (or URI path) names a mapping-key file. */
export function isMappingFileName(path: string): boolean {
  const name = baseName(path);
  if (!name.toLowerCase().endsWith('.json')) {
    return false;
  }
  return name.includes('mapping_key') || name === 'output_0_key_mapping.json';
}

/** The language client's document selector entries (plain objects, so this module stays vscode-free). */
export function documentSelector(): { scheme: string; language: string; pattern: string }[] {
  const out: { scheme: string; language: string; pattern: string }[] = [];
  for (const language of MAPPING_LANGUAGES) {
    for (const pattern of MAPPING_GLOBS) {
      out.push({ scheme: 'file', language, pattern });
    }
  }
  return out;
}

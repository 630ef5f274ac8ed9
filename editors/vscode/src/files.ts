/** File-name rules for mapping-key files. Pure: no `vscode` import. */

/** Mapping-key JSON files, and msprobe's YAML mapping files (as the server's pairing.MAPPING_GLOBS; tested). */
export const MAPPING_GLOBS = [
  '**/*mapping_key*.json',
  '**/output_0_key_mapping.json',
  '**/data_mapping*.yaml',
  '**/data_mapping*.yml',
  '**/cell_mapping*.yaml',
  '**/cell_mapping*.yml',
] as const;

/** A glob for `workspace.findFiles` covering every mapping-key file name. */
export const MAPPING_FIND_GLOB = `{${MAPPING_GLOBS.join(',')}}`;

/** The editor languages of mapping files, by how the glob ends. */
function languagesOf(pattern: string): readonly string[] {
  return pattern.endsWith('.json') ? ['json', 'jsonc'] : ['yaml'];
}

export const MAPPING_LANGUAGES = ['json', 'jsonc', 'yaml'] as const;

function baseName(p: string): string {
  const parts = p.split(/[\\/]/);
  return parts[parts.length - 1] ?? '';
}

/** True when a path (or URI path) names a mapping-key file. */
export function isMappingFileName(path: string): boolean {
  const name = baseName(path);
  const lower = name.toLowerCase();
  if (lower.endsWith('.json')) {
    return name.includes('mapping_key') || name === 'output_0_key_mapping.json';
  }
  if (lower.endsWith('.yaml') || lower.endsWith('.yml')) {
    return name.startsWith('data_mapping') || name.startsWith('cell_mapping');
  }
  return false;
}

/** The language client's document selector entries (plain objects, so this module stays vscode-free). */
export function documentSelector(): { scheme: string; language: string; pattern: string }[] {
  const out: { scheme: string; language: string; pattern: string }[] = [];
  for (const pattern of MAPPING_GLOBS) {
    for (const language of languagesOf(pattern)) {
      out.push({ scheme: 'file', language, pattern });
    }
  }
  return out;
}

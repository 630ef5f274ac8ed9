/** The status bar item: shows a StatusView (status.ts). */
import * as vscode from 'vscode';
import { StatusView } from './status';

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('rcaLsp.status', vscode.StatusBarAlignment.Left, 10);

  constructor() {
    this.item.name = 'rca-lsp';
  }

  show(view: StatusView | undefined): void {
    if (!view) {
      this.item.hide();
      return;
    }
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.command = view.command ? { title: 'rca-lsp', command: view.command.id, arguments: view.command.args } : undefined;
    this.item.backgroundColor = view.background ? new vscode.ThemeColor(`statusBarItem.${view.background}Background`) : undefined;
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }
}

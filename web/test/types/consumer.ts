// Compiled by `tsc --noEmit` in the Node tests: the package's generated types as a
// TypeScript user meets them.
import { checkSettings, judge, review, rules, type Review, type Rule, type SettingsCheck } from '@jumppod/contract';

const answer: Review = judge('kind: Pod', { cpu: { minimum: '200m' } }, { operation: 'CREATE' });
const verdict: 'accepted' | 'mutated' | 'rejected' = answer.verdict;
const firstOp: string | undefined = answer.patch[0]?.op;
const container: string | undefined = answer.violations[0]?.container;
const allowed: boolean = review({ request: {} }).response.allowed;
const check: SettingsCheck = checkSettings({ mutate: false });
const listed: Rule[] = rules(undefined);
export { verdict, firstOp, container, allowed, check, listed };
